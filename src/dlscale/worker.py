"""Worker entry point: ``python -m dlscale.worker RUN_DIR/spec.json``.

The spec file in and the per-rank events file out are the whole contract with the parent, so a
worker may run under any interpreter that can import dlscale (and its backend's framework). The
process learns its rank from its launcher's variables, its role from the layout in the spec,
and sets the variables its backend's cluster hook gives it (a one-command launcher such as
mpirun cannot set different variables per rank). A spec without hosts (Slurm placed the ranks)
gets them from the launcher (``Launcher.hosts``: the step's node list). A microbench spec
(``task``) runs the backend's collectives in the processes that train; the others (a parameter
server's scheduler and servers) run the backend's worker as in training, serving them.

Every launcher starts it as ``python -P -m dlscale.worker`` with ``PYTHONSAFEPATH=1``
(:func:`dlscale.launchers.base.worker_command`): nothing is imported from the working
directory, where a user's ``random.py`` would otherwise run in every rank.

A worker started by dlscale (``DLSCALE_PARENT_PID`` set) first starts a watchdog thread
(:mod:`dlscale.runtime.watchdog`): once the dlscale process that started it is gone, whatever
killed it, the worker kills its process group, so no rank outlives its run. One started by hand
has none.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import traceback
from pathlib import Path

from dlscale.contract.backends import BACKENDS
from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import UserError, WorkerFault
from dlscale.contract.events import EventWriter, events_path
from dlscale.contract.files import read_json
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.layout import Addresses
from dlscale.contract.plugins import load_plugins
from dlscale.contract.records import End, Error, Start
from dlscale.contract.registry import load_object
from dlscale.contract.run_config import RunConfig
from dlscale.contract.text import clip, one_line, visible
from dlscale.runtime import scratch
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.placement import check_placement
from dlscale.runtime.watchdog import start_watchdog


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dlscale.worker RUN_DIR/spec.json", file=sys.stderr)
        return 2
    # its own temporary directory first, before any framework (its files go with the run),
    # then the watchdog: one started before it could sweep the run's directories, dlscale
    # gone, while this made its own after (left behind)
    scratch.enter()
    start_watchdog()
    _forget_working_directory()
    spec_path = Path(argv[0])
    rank, local_rank, processes = WorkerContext.rank_from_environment()
    events = EventWriter(events_path(spec_path.parent, rank), rank)
    try:
        spec = read_json(spec_path, "spec")
        load_plugins(spec.get("plugins", []))
        config = RunConfig.from_dict(spec["config"])
        layout = config.layout()
        process = layout.processes[rank] if rank < layout.size else None
        events.write(
            Start(
                pid=os.getpid(),
                world_size=processes,
                local_rank=local_rank,
                role=process.role if process else "?",
                python=sys.executable,
                cpus=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
            )
        )
        WorkerContext.check_entry_rank(rank)
        if process is None or processes != layout.size:
            raise UserError(
                f"launched {processes} processes for a run that needs {layout.size} "
                f"({', '.join(f'{p.role} {p.rank}' for p in layout.processes)})"
            )
        addresses = Addresses.from_dict(spec["cluster"])
        if not addresses.hosts:  # placed by a scheduler: the launcher's tool says where
            hosts = LAUNCHERS.get(config.launcher).create().hosts(layout.size)
            addresses = Addresses(hosts=hosts, ports=addresses.ports)
        check_placement(rank, addresses.hosts)
        backend = BACKENDS.get(config.backend)
        os.environ.update(backend.cluster_env(process, layout, addresses, config))
        ctx = WorkerContext(
            config=config,
            run_dir=spec_path.parent,
            rank=rank,
            local_rank=local_rank,
            layout=layout,
            addresses=addresses,
            threads=int(os.environ.get("DLSCALE_THREADS", "1")),
            events=events,
        )
        microbench = spec.get("task") == "microbench"
        if microbench and (process.trains or backend.collectives_everywhere):  # collectives
            from dlscale.microbench import Settings

            load_object(str(backend.collectives))(ctx, Settings.from_dict(spec["microbench"]))
        else:  # training, or a role that serves it (a microbench's parameter servers too)
            if process.trains and not microbench:
                check_data_dir(config)
            load_object(backend.worker)(ctx)
    except UserError as error:
        _record(events, "user", error)
        print(f"dlscale worker rank {rank}: {error}", file=sys.stderr)
        return 2
    except WorkerFault as error:
        _record(events, "fault", error)
        print(f"dlscale worker rank {rank}: {error}", file=sys.stderr)
        return 1
    except SystemExit as done:  # a model function or a plug-in that exits instead of returning
        said = f"the run's code called sys.exit({clip(repr(done.code), 200)}) while it trained"
        _record(events, "user", f"{said}; a model function returns its model")
        print(f"dlscale worker rank {rank}: {said}", file=sys.stderr)
        return 2
    except BaseException as error:  # a worker must leave a record of any failure
        _record(events, type(error).__name__, error, with_traceback=True)
        with contextlib.suppress(Exception):
            traceback.print_exc()
        return 1
    events.write(End())
    events.close()
    return 0


def check_data_dir(config: RunConfig) -> None:
    """The training rank's data directory exists where it runs, said in one line naming the
    host before any framework loads: the parent checked it on the machine it planned from (a
    dry run not even there), whose file systems may differ from this node's."""
    reads_it = DATASETS.get(config.dataset).needs_data_dir
    if reads_it and config.data_dir and not Path(config.data_dir).exists():
        raise UserError(
            f"data_dir {visible(config.data_dir)} does not exist on {visible(socket.gethostname())}"
            ", where this rank runs: put the data set on a file system the nodes share, or give "
            "--data-dir its path on the nodes"
        )


_STDERR = "the rank's stderr file in the run's directory has all of it"


def _record(
    events: EventWriter, kind: str, error: BaseException | str, with_traceback: bool = False
) -> None:
    """Write the record of the failure that ended the worker, even when a signal handler
    raises while it is made: torch's SIGCHLD handler raises "DataLoader worker ... is killed"
    wherever the main thread is, and it landed once inside ``traceback.format_exc()`` for the
    ConnectionResetError the same death had caused first, so the rank left no record and its
    peer, which only lost its connection, was blamed. The first failure is the one recorded."""
    message = clip(one_line(str(error)), where=_STDERR)
    for _ in range(3):
        try:
            said = clip(traceback.format_exc(), 20_000, _STDERR) if with_traceback else None
            events.write(Error(kind=kind, message=message, traceback=said))
            return
        except Exception:  # raised by a signal handler meanwhile: make the record again
            with_traceback = False


def _forget_working_directory() -> None:
    """Take the working directory off the import path where a launcher started the worker
    without ``-P`` or ``PYTHONSAFEPATH`` (a plug-in's tool, by hand): a ``numpy.py`` or
    ``torch.py`` where the run was started is then not what the backend imports. Modules this
    file imported before are loaded already; dlscale's launchers keep even those safe."""
    if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]


def _exit(code: int) -> None:
    """Leave without the interpreter's exit-time clean-up once every record is written.

    A framework's native objects destroyed at interpreter exit were seen to abort the process
    after its run had finished (gloo under torch-ddp: SIGABRT, "terminate called without an
    active exception", rank 0, once in a few hundred distributed runs on a loaded 2-core
    machine), which turned a whole run into a failed one; a thread left blocked in native code
    could hold the exit up instead. The backend has already shut its framework down (its
    teardown: destroy_process_group, hvd.shutdown) and the events file is closed, so nothing
    is lost by skipping that clean-up; the temporary files a framework would have removed then
    go with the worker's own temporary directory."""
    sys.stdout.flush()
    sys.stderr.flush()
    scratch.leave()  # what a framework left to remove at exit (runtime/scratch.py)
    os._exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
