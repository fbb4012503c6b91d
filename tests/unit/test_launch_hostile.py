"""What a hostile trial of process start-up found, each checked without a training run: the
working directory kept off every worker's import path, an old interpreter refused, the exit
status and words of a stopped command, the OOM killer's evidence, a microbench's buffers in
the resource guard, Slurm's messages on one line, the default study's description, and a
profile that cannot be stored (the real runs: tests/distributed/test_worker_isolation.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dlscale.cli.microbench
import dlscale.cli.profile
import dlscale.preflight
from dlscale.cli import build_parser, main
from dlscale.config import RunConfig
from dlscale.config.describe import describe_points
from dlscale.launchers.horovodrun import HorovodrunLauncher
from dlscale.launchers.local import LocalLauncher
from dlscale.launchers.mpirun import MpirunLauncher
from dlscale.launchers.oom import OomWatch, killed_in_log, out_of_memory
from dlscale.launchers.ray_launcher import RayLauncher
from dlscale.launchers.slurm import SlurmLauncher
from dlscale.launchers.slurm_controller import said
from dlscale.launchers.torchrun import TorchrunLauncher
from dlscale.microbench import Settings
from dlscale.preflight import check_points, collective_bytes, microbench_bytes
from dlscale.runtime.environment import MemoryCgroup, memory_cgroup

SPEC = Path("/r/x/spec.json")
OLD_PYTHON = Path("/root/.pyenv/versions/3.10.13/bin/python")


def _one_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("dlscale: error:"), err
    return err


# -- 1. the working directory is on no worker's import path -------------------------------


def _python_commands(argv: tuple[str, ...], python: str) -> list[list[str]]:
    """Every interpreter a command line starts directly: from each ``python`` to the end."""
    return [list(argv[i:]) for i, word in enumerate(argv) if word == python]


@pytest.mark.parametrize(
    ("launcher", "backend", "options"),
    [
        (LocalLauncher, "torch-ddp", {}),
        (LocalLauncher, "torch-ps", {"num_servers": 2}),  # server roles
        (LocalLauncher, "tf-ps", {}),  # ps tasks and a chief
        (LocalLauncher, "mxnet-kv", {"kvstore": "dist_sync"}),  # a scheduler and servers
        (TorchrunLauncher, "torch-ddp", {"launcher": "torchrun"}),
        (TorchrunLauncher, "torch-ddp", {"launcher": "torchrun", "nnodes": 2}),
        (MpirunLauncher, "horovod-torch", {"launcher": "mpirun"}),
        (HorovodrunLauncher, "horovod-torch", {"launcher": "horovodrun"}),
        (SlurmLauncher, "tf-ps", {"launcher": "slurm", "slurm_mode": "srun", "cpus_per_node": 8}),
        (RayLauncher, "mxnet-kv", {"launcher": "ray", "kvstore": "dist_sync"}),
    ],
)
def test_every_launcher_starts_its_workers_with_a_safe_import_path(launcher, backend, options):
    cfg = RunConfig.make(backend=backend, workers=2, model="tiny", **options)
    plan = launcher().plan(cfg, SPEC, "/py", ports=tuple(range(29500, 29520)), cores=8)
    assert plan.entries
    for entry in plan.entries:
        assert entry.env["PYTHONSAFEPATH"] == "1"  # also reaches what a tool starts itself
        commands = _python_commands(entry.argv, "/py")
        assert commands, entry.argv
        for command in commands:  # the worker, and torchrun's agent
            assert command[1] == "-P", command


def test_a_batch_script_starts_the_ranks_and_its_finishing_step_with_a_safe_path():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, launcher="slurm", slurm_mode="sbatch",
                         wait=False, cpus_per_node=8)  # fmt: skip
    (entry,) = SlurmLauncher().plan(cfg, SPEC, "/py", ports=(1, 2)).entries
    script = entry.files[Path("/r/x/job.sbatch")]
    assert "export PYTHONSAFEPATH=1" in script.splitlines()
    assert "/py -P -m dlscale.worker /r/x/spec.json" in script
    assert f"{sys.executable} -P -m dlscale.finish /r/x/spec.json" in script


def test_an_empty_entry_of_pythonpath_does_not_put_the_working_directory_back(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ":/opt/mine::")  # what `export P=$P:/opt/mine` leaves
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny")
    plan = LocalLauncher().plan(cfg, SPEC, "/py", ports=(29500,), cores=8)
    assert plan.entries[0].env["PYTHONPATH"] == "/r/x/pythonpath:/opt/mine"


def _fake_python(tmp_path: Path, version: str) -> Path:
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nprintf '{version}'\n")
    fake.chmod(0o755)
    return fake


def test_an_interpreter_older_than_3_11_is_refused_in_one_line(tmp_path: Path, capsys):
    """-P, which every worker starts with, is Python 3.11's: an older python key would fail
    in every rank with 'Unknown option: -P'."""
    pythons = [_fake_python(tmp_path, "3 9")]
    if OLD_PYTHON.exists():  # a real one, where pyenv has it
        pythons.append(OLD_PYTHON)
    for python in pythons:
        results = tmp_path / "r"
        err = _one_line(capsys, ["run", "--set", f"python={python}", "--model", "tiny",
                                 "--results", str(results)])  # fmt: skip
        assert "workers need Python 3.11 or newer" in err and str(python) in err
        assert not results.exists()
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\nexit 0\n")
    not_python.chmod(0o755)
    err = _one_line(capsys, ["run", "--set", f"python={not_python}", "--dry-run"])
    assert "does not run as a Python interpreter" in err


# -- 2. a stopped command: its exit status and what it says --------------------------------


@contextlib.contextmanager
def _handlers_kept():
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)


def _signalled(number: int):
    def command(args) -> int:
        os.kill(os.getpid(), number)
        time.sleep(5)  # the handler raises in this thread first
        raise AssertionError("the signal did not stop the command")

    return command


@pytest.mark.parametrize(
    ("command", "number", "code", "words"),
    [
        ("run", signal.SIGTERM, 143, "run stopped by SIGTERM; completed points are kept; rerun"),
        ("run", signal.SIGHUP, 129, "run stopped by SIGHUP; completed points are kept"),
        ("microbench", signal.SIGTERM, 143, "microbench does not resume: rerun measures every"),
        ("microbench", signal.SIGINT, 130, "microbench interrupted (Ctrl-C); the runs measured"),
    ],
)
def test_a_stopped_command_exits_128_plus_the_signal_and_says_what_it_keeps(
    monkeypatch, capsys, command, number, code, words
):
    module = {"run": "dlscale.cli.run", "microbench": "dlscale.cli.microbench"}[command]
    monkeypatch.setattr(f"{module}.main", _signalled(number))
    with _handlers_kept():
        # as a shell's foreground command gets it: the signal neither ignored (a background
        # job of a non-interactive shell inherits SIGINT ignored, which dlscale keeps, as
        # nohup's SIGHUP: `nohup make test` hands this test SIGHUP ignored) nor blocked
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        assert main([command]) == code
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    if command == "microbench":
        assert "resume from" not in err and "rerun to resume" not in err


EARLY_SIGNAL = """
import os, signal, sys
# as an interactive shell starts its command (Python's own start, had the signals not been
# ignored): a test run in a script's background inherits SIGINT ignored, which dlscale keeps
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from dlscale.start import entry

MODULE, NUMBER = sys.argv[1], int(sys.argv[2])

class Stop:  # the signal lands the moment MODULE starts to load, as a Ctrl-C might
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            os.kill(os.getpid(), NUMBER)
        return None

sys.meta_path.insert(0, Stop())
sys.argv = ["dlscale", "ls", "models"]
entry()
"""


@pytest.mark.parametrize("module", ["dlscale.cli", "dlscale.cli.run"])
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_dlscale_starts_is_one_line_never_a_traceback(module, number):
    """Issue 42: a Ctrl-C in the first 0.2 s (dlscale importing its commands, before its
    handlers were in place) printed a KeyboardInterrupt traceback."""
    done = subprocess.run(
        [sys.executable, "-c", EARLY_SIGNAL, module, str(int(number))],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert done.returncode == 128 + number, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dlscale: ") and "while starting; nothing was run" in line


def test_a_hangup_nohup_ignores_stays_ignored(monkeypatch):
    monkeypatch.setattr("dlscale.cli.env.main", lambda args: 0)
    with _handlers_kept():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        assert main(["env"]) == 0
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL


# -- 3. out of memory: evidence, or the plain signal -------------------------------------


def _cgroup_files(tmp_path: Path, version: int) -> Path:
    """A /proc/self of a process in cgroup /a/b, its hierarchy mounted under tmp_path."""
    proc, mount = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    group = mount / "a" / "b"
    group.mkdir(parents=True)
    if version == 1:
        (proc / "cgroup").write_text("5:devices:/a/b\n4:memory:/a/b\n0::/\n")
        line = f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
        (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
        (group / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
        (group / "memory.usage_in_bytes").write_text(f"{3 << 30}\n")
        (mount / "a" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
        (mount / "a" / "memory.usage_in_bytes").write_text(f"{3 << 30}\n")
    else:
        (proc / "cgroup").write_text("0::/a/b\n")
        line = f"41 31 0:38 / {mount} rw,relatime - cgroup2 cgroup2 rw\n"
        (group / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n")
        (group / "memory.max").write_text("max\n")
        (group / "memory.current").write_text(f"{1 << 30}\n")
        (mount / "a" / "memory.max").write_text(f"{2 << 30}\n")
        (mount / "a" / "memory.current").write_text(f"{1536 << 20}\n")
    (proc / "mountinfo").write_text(f"23 1 0:21 / /proc rw - proc proc rw\n{line}")
    return proc


@pytest.mark.parametrize("version", [1, 2])
def test_the_memory_cgroup_and_its_oom_kill_counter_are_read_from_procfs(tmp_path, version):
    cgroup = memory_cgroup(_cgroup_files(tmp_path, version))
    assert cgroup is not None and cgroup.version == version
    assert cgroup.path == tmp_path / "cgroup" / "a" / "b"
    assert cgroup.oom_kills() == 2
    # the least room under a limit, this cgroup's or one above it
    assert cgroup.headroom_bytes() == (5 << 30 if version == 1 else 512 << 20)


def test_no_memory_cgroup_where_none_is_mounted(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/\n")
    (proc / "mountinfo").write_text("23 1 0:21 / /proc rw - proc proc rw\n")
    assert memory_cgroup(proc) is None
    assert memory_cgroup(tmp_path / "nothing") is None


@pytest.mark.parametrize("version", [1, 2])
def test_a_rise_of_the_cgroups_oom_kill_counter_is_evidence_and_named(tmp_path, version):
    cgroup = memory_cgroup(_cgroup_files(tmp_path, version))
    assert cgroup is not None
    watch = OomWatch.start(cgroup, kmsg=tmp_path / "no-kmsg", vmstat=tmp_path / "no-vmstat")
    assert watch.evidence({4242}) is None  # nothing rose: the plain signal is reported
    counter = Path(cgroup.counter_name())
    counter.write_text(counter.read_text().replace("oom_kill 2", "oom_kill 3"))
    said_ = watch.evidence({4242})
    assert said_ is not None and "oom_kill 2 -> 3" in said_ and str(counter) in said_
    line = out_of_memory("rank 1 was killed by SIGKILL", said_)
    assert line.startswith("rank 1 was killed by SIGKILL: out of memory (the kernel's OOM killer")
    assert line.endswith("; use a smaller batch or fewer workers")


def test_without_a_cgroup_counter_the_machines_counter_is_named_as_the_machines(tmp_path):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 10\noom_kill 5\n")
    watch = OomWatch(cgroup=None, cgroup_kills=None, machine_kills=5, since=0.0,
                     kmsg=tmp_path / "no-kmsg", vmstat=vmstat)  # fmt: skip
    assert watch.evidence() is None
    vmstat.write_text("pgfault 10\noom_kill 6\n")
    assert "killed 1 process on this machine" in (watch.evidence() or "")


def test_the_kernel_log_names_the_killed_process_since_the_run_started(tmp_path):
    kmsg = tmp_path / "kmsg"  # one record, as a read of /dev/kmsg returns one
    kmsg.write_text(
        "3,2117,8662866743,-;Memory cgroup out of memory: Killed process 15782 (python3) "
        "total-vm:630968kB, anon-rss:306304kB\n"
    )
    assert killed_in_log(kmsg, {15782}, since=8000.0) == (15782, "python3")
    assert killed_in_log(kmsg, {15782}, since=9000.0) is None  # before the run started
    assert killed_in_log(kmsg, {1}, since=0.0) is None  # another process
    watch = OomWatch(cgroup=None, cgroup_kills=None, machine_kills=None, since=8000.0,
                     kmsg=kmsg, vmstat=tmp_path / "none")  # fmt: skip
    assert watch.evidence({15782}) == (
        "the kernel's OOM killer killed its process 15782 (python3), says the kernel log"
    )


def _child_cgroup(name: str, limit: int) -> MemoryCgroup:
    """A v1 memory cgroup below this process's, with a limit (root and a writable v1 memory
    hierarchy, as on the test machine; else the test is skipped)."""
    here = memory_cgroup()
    if here is None or here.version != 1 or os.geteuid() != 0:
        pytest.skip("needs root and cgroup v1's memory controller (as on the test machine)")
    path = here.path / f"{name}-{os.getpid()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    return MemoryCgroup(path=path, version=1, top=here.top)


def _in_cgroup(cgroup: MemoryCgroup, code: str) -> subprocess.Popen:
    script = f'echo $$ > "{cgroup.path}/cgroup.procs" && exec "{sys.executable}" -c "{code}"'
    return subprocess.Popen(["sh", "-c", script])


def test_a_real_oom_kill_in_a_small_cgroup_is_evidence_and_a_kill_9_is_not(tmp_path):
    """A child in a 64 MiB memory cgroup that asks for 512 MiB is killed by the kernel's OOM
    killer (SIGKILL): its cgroup's counter says so (the kernel log left out, to check the
    counter alone). A child of the same cgroup killed with kill -9 leaves no evidence."""
    cgroup = _child_cgroup("dlscale-test-oom", 64 << 20)
    try:
        watch = OomWatch.start(cgroup, kmsg=tmp_path / "no-kmsg")
        killed = _in_cgroup(cgroup, "import time; time.sleep(60)")
        time.sleep(0.5)
        killed.kill()
        assert killed.wait(timeout=30) == -signal.SIGKILL
        assert watch.evidence({killed.pid}) is None
        hungry = _in_cgroup(cgroup, "x = bytearray(512 << 20)")
        assert hungry.wait(timeout=60) == -signal.SIGKILL
        said_ = watch.evidence({hungry.pid})
        assert said_ is not None and "oom_kill 0 -> 1" in said_, said_
        if os.access("/dev/kmsg", os.R_OK):  # the kernel log names the process itself
            log = OomWatch.start(cgroup)
            again = _in_cgroup(cgroup, "x = bytearray(512 << 20)")
            assert again.wait(timeout=60) == -signal.SIGKILL
            assert f"killed its process {again.pid}" in (log.evidence({again.pid}) or "")
    finally:
        for _ in range(50):
            with contextlib.suppress(OSError):
                cgroup.path.rmdir()
                break
            time.sleep(0.1)


# -- 4. the resource guard counts a microbench's buffers ---------------------------------


def test_collective_buffers_by_hand():
    gib = 1 << 30
    assert collective_bytes("all_gather", gib, 4) == 5 * gib + gib // 4
    assert collective_bytes("all_reduce", gib, 4) == 4 * gib
    assert collective_bytes("reduce_scatter", gib, 4) == 2 * gib + 3 * gib // 4
    assert collective_bytes("send_recv", gib, 4, rank=3) == gib  # it only holds its buffer
    cfg = RunConfig.make(backend="torch-ddp", workers=4, model="tiny", dataset="synthetic")
    settings = Settings(collectives=("all_reduce", "all_gather"), sizes=(4, gib))
    needed, collective, size = microbench_bytes(cfg, settings)
    assert (collective, size) == ("all_gather", gib)
    assert needed == 4 * (100 << 20) + 4 * (5 * gib + gib // 4)
    # torch-ps' push and pull: its 2 servers also hold every worker's part of the message
    ps = RunConfig.make(backend="torch-ps", workers=2, model="tiny", num_servers=2)
    pushpull = Settings(collectives=("ps_pushpull",), sizes=(gib,))
    assert microbench_bytes(ps, pushpull) == (4 * (100 << 20) + 2 * 4 * gib + 2 * gib,
                                              "ps_pushpull", gib)  # fmt: skip


def test_a_microbench_whose_buffers_exceed_the_memory_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dlscale.preflight, "memory_available_gib", lambda: 22.8)
    results = tmp_path / "r"
    argv = ["microbench", "--sizes", "1G", "--workers", "4", "--collectives", "all_gather",
            "--results", str(results)]  # fmt: skip
    err = _one_line(capsys, argv)
    assert "microbench all_gather of 1 GiB on 4 ranks needs at least 21.4 GiB" in err
    assert "use smaller --sizes or fewer --workers, or --set resource_guard=false" in err
    assert not results.exists()
    ran = []
    monkeypatch.setattr(dlscale.cli.microbench, "measure", lambda *a: ran.append(a) or {
        "error": None, "rows": [], "fits": {}, "fit": None, "run_id": "x", "config": {},
        "processes": 4})  # fmt: skip
    monkeypatch.setattr(dlscale.cli.microbench, "_show", lambda *a: None)
    assert main([*argv, "--set", "resource_guard=false"]) == 0 and len(ran) == 1
    # 2 workers fit: 2 x 5.5 GiB
    two = RunConfig.make(backend="torch-ddp", workers=2, model="tiny")
    gather = Settings(collectives=("all_gather",), sizes=(1 << 30,))
    check_points((two,), results, create=False, microbench=gather)


def test_a_training_point_is_compared_with_the_memory_available_now(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dlscale.preflight, "memory_available_gib", lambda: 1.0)
    err = _one_line(capsys, ["run", "--model", "tiny", "--workers", "8", "--batch-size", "4096",
                             "--set", "resource_guard=true", "--dry-run"])  # fmt: skip
    assert "more than 90% of the 1 GiB available here" in err


# -- 5. Slurm: one line ------------------------------------------------------------------


def test_a_slurm_tools_message_of_several_lines_is_one_line():
    text = (
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
        "sbatch: error: (retry)\n"
    )
    assert said(text) == "Batch job submission failed: Invalid partition name specified; (retry)"
    banner = "Slurmctld(primary) at vm is DOWN\n*****\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
    assert "\n" not in said(banner)


# -- 6. the default study's description --------------------------------------------------


def _default_study(argv: list[str]) -> str:
    """The description `dlscale run ARGV` gives its study (cli/run.study_from)."""
    from dlscale.cli.run import study_from

    return study_from(build_parser().parse_args(["run", *argv])).description


def test_a_study_is_described_by_what_it_runs_once_flags_change_its_grid():
    assert _default_study([]) == "plain PyTorch at 1 worker against DDP at 1 and 2 workers"
    ring = _default_study(["--backend", "torch-ring"])  # with the machine's reference point
    assert ring == "torch-single at 1 worker, torch-ring at 1 and 2 workers"
    alone = ["--backend", "torch-ring", "--set", "machine_reference=false"]
    assert _default_study(alone) == "torch-ring at 1 and 2 workers"
    assert "DDP" not in _default_study(["--workers", "2,4"])
    assert "DDP" not in _default_study(["--set", "backend=torch-ring"])
    kept = _default_study(["--repeats", "2", "--set", "order=random"])  # the same grid
    assert kept == "plain PyTorch at 1 worker against DDP at 1 and 2 workers"
    points = [RunConfig.make(backend="torch-ddp", workers=w, model="tiny") for w in (1, 2, 4)]
    assert describe_points(points) == "torch-ddp at 1, 2 and 4 workers"


# -- 7. predict from a read-only working directory ---------------------------------------


def test_predict_in_a_read_only_directory_names_the_path_and_the_fix(tmp_path, capsys, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    readonly = tmp_path / "ro"
    readonly.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(readonly)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.chdir(readonly)
        # a profile is kept only where --results says (without it: a temporary directory)
        err = _one_line(capsys, ["predict", "--model", "tiny", "--bandwidth", "10gbit",
                                 "--results", "dlscale-results"])  # fmt: skip
        assert f"--results {readonly}/dlscale-results" in err
        assert "give --results DIR where you can write, or --compute-ms MS" in err
        monkeypatch.setattr(dlscale.cli.profile, "_gradient_bytes", lambda model: 4000)
        assert main(["predict", "--model", "tiny", "--bandwidth", "10gbit",
                     "--compute-ms", "10"]) == 0  # fmt: skip
        assert list(readonly.iterdir()) == []
    finally:
        monkeypatch.chdir(tmp_path)
        subprocess.run(["umount", str(readonly)], check=True)
