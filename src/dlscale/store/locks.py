"""The lock of a run directory: which process runs the point.

A lock appears with its content in one step: the owner is written to a temporary file in the
run directory, which is then hard-linked to ``lock`` (``link`` fails if a lock is there, as
``O_EXCL`` does). No process can see, or leave behind, a lock without an owner; a full disk
fails the write before any lock exists. A lock whose owner is certainly gone is taken over
under a ``lock.takeover`` guard: on this host, when its process is gone; on another, when the
Slurm job it ran in has ended (a dlscale killed on a compute node, read from the login node or
the next job's node). Nothing here follows a link at the lock's or the guard's path,
and something there that dlscale does not make (a directory, a link) is refused with one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlscale.contract.files import OutputError, output_failure, read_small_file, refuse_link
from dlscale.contract.numbers import finite_number, whole_value
from dlscale.contract.text import shell_command
from dlscale.runtime.procfs import boot_id, is_alive, process_start
from dlscale.runtime.slurm_jobs import JOB_ID, job_ended, this_job

LOCK = "lock"
TAKEOVER = "lock.takeover"
"""Held (briefly) by whoever removes a stale lock, so that two processes that both judged a lock
stale cannot remove each other's new one. It names its holder as a lock does: one left by a
crash is removed once its process is gone (another host's, after a few seconds)."""
TEMP_PREFIX = ".lock."
"""A lock being written: ``.lock.XXXXXXXX.tmp``, removed by its writer once linked (or not)."""
TAKEOVER_STALE_S = 10.0
UNREADABLE_LOCK_STALE_S = 60.0
"""A lock that cannot be parsed (one left by an older dlscale, whose owner died between
creating and writing it) is stale after this long; younger, it may be one being written."""
PID_MAX = 2**22
"""Linux's largest process id (``/proc/sys/kernel/pid_max`` is at most 4194304)."""
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}


def this_process() -> dict[str, Any]:
    pid = os.getpid()
    owner = {
        "host": socket.gethostname(),
        "pid": pid,
        "start": process_start(pid),
        "boot": boot_id(),
        "time": time.time(),
    }
    if (job := this_job()) is not None:  # any host can ask Slurm whether the job ended
        owner["slurm_job"] = job
    return owner


def describe_owner(owner: dict[str, Any] | None) -> str:
    """A lock's owner in words: ``pid 123 on host h, since 12:03:04`` (``owner`` as
    :func:`read_owner` gives it: every value checked)."""
    if not owner:
        return "owner unknown"
    since = owner.get("time")
    when = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if since else ""
    job = f", in Slurm job {owner['slurm_job']}" if owner.get("slurm_job") else ""
    return f"pid {owner['pid']} on host {owner['host']}{job}{when}"


def read_owner(lock: Path, dir_fd: int | None = None) -> dict[str, Any] | None:
    """Who holds ``lock``, as written in it, every value checked (a lock is a file anyone who
    can write to the store can forge: a pid of ``1e999`` or a time of ``1e300`` is damage);
    None: no lock, or not a readable one."""
    try:
        return parse_owner(read_small_file(lock if dir_fd is None else lock.name, dir_fd=dir_fd))
    except OSError:
        return None


def parse_owner(raw: bytes) -> dict[str, Any] | None:
    """The owner in a lock's bytes, or None if they are not one: the pid a whole number a
    process id can be, the host a name of at most 255 characters, the start and boot as
    :func:`this_process` writes them (else None) and the time a date between 1970 and 5138."""
    try:
        owner = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(owner, dict) or (pid := whole_value(owner.get("pid"), 1, PID_MAX)) is None:
        return None
    host, boot, job = owner.get("host"), owner.get("boot"), owner.get("slurm_job")
    return {
        "host": host[:255] if isinstance(host, str) else "?",
        "pid": pid,
        "start": whole_value(owner.get("start")),
        "boot": boot[:64] if isinstance(boot, str) else None,
        "time": since if finite_number(since := owner.get("time"), 1.0, 1e11) else None,
        "slurm_job": job if isinstance(job, str) and JOB_ID.fullmatch(job) else None,
    }


def refuse_foreign(path: Path, fd: int | None = None) -> None:
    """Raise :class:`OutputError` if ``path`` (a lock or its guard; with ``fd``, its name under
    that directory) holds what dlscale never makes there: a link, a directory, a FIFO. A
    regular file, or nothing, passes."""
    try:
        mode = os.lstat(path if fd is None else path.name, dir_fd=fd).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise output_failure(path, error) from None
    if stat.S_ISLNK(mode):
        refuse_link(path, "a run's lock")  # a link with ``fd``: said by its path alone
        raise OutputError(f"{path} is a symbolic link; remove it and run the command again")
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        remove = shell_command(["rm", "-r" if stat.S_ISDIR(mode) else "-f", path])
        raise OutputError(
            f"{path} is {kind}, not a dlscale lock file; dlscale does not remove what it did "
            f"not make: if no dlscale process is running that point, remove it ({remove}) and "
            "run the command again"
        )


def acquire(lock: Path, fd: int) -> bool:
    """Take ``lock`` for this process; False if a live process holds it. ``fd``: the run
    directory, opened without following a link; every name is made and removed under it."""
    owner = json.dumps(this_process())
    for _ in range(3):
        if _create(lock, fd, owner):
            return True
        refuse_foreign(lock, fd)
        if not take_over(lock, fd):
            return False
    return False


def release(lock: Path, fd: int) -> None:
    """Remove ``lock`` if it is this process's (or unreadable); another process's lock (ours
    was removed by hand and the point taken since) stays. Never raises: it runs in ``finally``
    blocks, where an error would hide the one that ended the run."""
    owner = read_owner(lock, fd)
    me = this_process()
    if owner and any(owner[k] != me[k] for k in ("host", "pid", "start")):
        return
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(lock.name, dir_fd=fd).st_mode):
            os.unlink(lock.name, dir_fd=fd)


def _create(lock: Path, fd: int, owner: str) -> bool:
    """Create ``lock`` holding ``owner`` at once; False if a lock (or anything) is there."""
    tmp = f"{TEMP_PREFIX}{secrets.token_hex(6)}.tmp"
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        handle = os.fdopen(os.open(tmp, flags, 0o666, dir_fd=fd), "w", encoding="utf-8")
    except FileNotFoundError:
        raise _gone(lock) from None
    except OSError as error:
        raise output_failure(lock, error) from None
    try:
        try:
            with handle:
                handle.write(owner)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise output_failure(lock, error) from None
        try:  # fails if anything is at ``lock``, and never follows a link there
            os.link(tmp, lock.name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except FileNotFoundError:
            raise _gone(lock) from None
        except OSError as error:
            if error.errno not in _NO_HARD_LINKS:
                raise output_failure(lock, error) from None
            return _create_in_place(lock, fd, owner)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)


def _create_in_place(lock: Path, fd: int, owner: str) -> bool:
    """On a file system without hard links: ``O_EXCL``, then the owner; a failed write removes
    the lock it made, so a full disk leaves none."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        handle = os.fdopen(os.open(lock.name, flags, 0o666, dir_fd=fd), "w", encoding="utf-8")
    except FileExistsError:
        return False
    except OSError as error:
        raise output_failure(lock, error) from None
    try:
        with handle:
            handle.write(owner)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(lock.name, dir_fd=fd)
        raise output_failure(lock, error) from None
    return True


def _gone(lock: Path) -> OutputError:
    return OutputError(
        f"cannot take {lock}: its run directory {lock.parent} was removed; dlscale does not "
        "recreate it: run the command again"
    )


def take_over(lock: Path, fd: int) -> bool:
    """Remove ``lock`` if it is stale; True if it is gone (removed here or released). The
    guard names its holder as a lock does, so a holder this host sees alive keeps it however
    long it is held up: a guard that expired while its holder still meant to remove the stale
    lock let a second process remove it first and take the point, and the first then removed
    that new lock and took the point too (two winners, seen on a loaded 2-core machine)."""
    guard = lock.with_name(TAKEOVER)
    holder = json.dumps(this_process())
    for _ in range(2):
        if _create(guard, fd, holder):
            break
        refuse_foreign(guard, fd)
        # another process is taking it over (busy), or one crashed doing so: its guard goes
        if not _remove_if(guard, fd, _guard_left):
            return False
    else:
        return False
    try:
        return _remove_if(lock, fd, _stale)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(TAKEOVER, dir_fd=fd)


def _remove_if(path: Path, fd: int, left: Callable[[bytes, float], bool]) -> bool:
    """Remove ``path`` (the lock or the guard) if ``left`` judges its bytes and age abandoned;
    True if it is gone (removed here, or by its owner). The file is judged as opened and removed
    only while the name still names it (held open, its inode cannot be reused): a lock found
    gone is never removed, for a process that found the name free may make its own there
    before this one's ``unlink`` (two winners, seen in CI with a stale lock and 8 contenders)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        handle = os.open(path.name, flags, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError as error:
        refuse_foreign(path, fd)  # a link planted since: said in its own words
        raise output_failure(path, error) from None
    try:
        judged = os.fstat(handle)
        if not stat.S_ISREG(judged.st_mode):
            refuse_foreign(path, fd)
            return False
        try:
            raw = os.read(handle, 65536)
        except OSError:
            raw = b""
        if not left(raw, judged.st_mtime):
            return False
        try:
            now = os.lstat(path.name, dir_fd=fd)
        except FileNotFoundError:
            return True
        if (now.st_dev, now.st_ino) == (judged.st_dev, judged.st_ino):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=fd)
        return True
    finally:
        os.close(handle)


def _guard_left(raw: bytes, mtime: float) -> bool:
    """Whether a take-over guard was left by a crash: its holder's process is gone, where this
    host can tell; a guard of another host (or of an older dlscale, with no holder in it)
    after :data:`TAKEOVER_STALE_S`."""
    owner = parse_owner(raw)
    if owner is not None and owner["host"] == socket.gethostname():
        return _stale(raw, mtime)
    return time.time() - mtime > TAKEOVER_STALE_S


def _stale(raw: bytes, mtime: float) -> bool:
    """Whether a lock holding ``raw``, last written at ``mtime``, was certainly left by its
    owner (only the owner's host can tell, or Slurm for a job that ended)."""
    owner = parse_owner(raw)
    if owner is None:
        if not _cut_short(raw):  # no owner in it (a pid of 1e999): damage, not a lock being written
            return True
        return time.time() - mtime > UNREADABLE_LOCK_STALE_S
    if owner["host"] != socket.gethostname():
        # another host's run: only that host can tell, unless it ran in a Slurm job that ended
        return owner["slurm_job"] is not None and job_ended(owner["slurm_job"])
    boot = boot_id()
    if owner["boot"] and boot and owner["boot"] != boot:
        return True  # written before this machine rebooted
    return not is_alive(owner["pid"], owner["start"])  # gone, zombie, reused


def _cut_short(raw: bytes) -> bool:
    """Whether ``raw`` may be a lock an older dlscale was still writing (it made the file, then
    wrote its owner): empty, or JSON cut off at its end. Anything else without an owner in it
    is damage."""
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        return True
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return error.pos >= len(text.rstrip())
    except (ValueError, RecursionError):
        return False
    return False
