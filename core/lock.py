"""One writer per folder: the lock a command holds on the folder or file it writes (a build's ``--out``, a
training run's ``output_dir``, ``eval run --out``, the eval folder ``eval watch`` writes), so that a second
command into the same target is refused in one line naming the first, instead of both writing at once.

The lock file lies beside the target, ``PARENT/.<name>.veritune.lock`` (as a build's staging folder does): the
same place whether the target exists yet or not, never inside an output (a build's new directory replaces the
old one; ``overwrite_output_dir`` clears a run's folder; ``push_to_hub`` uploads it), so it is never taken for
foreign content or recorded as an output. It records its holder (host, pid, command, since when) for the refusal
line; the command is its name (``veritune build finer``, ``grpo.py``), never its arguments, which may hold a key.

The lock is a POSIX record lock (``fcntl.lockf``) held for as long as the command runs: the kernel releases it
when the process ends, killed or not, so a killed command leaves no stale lock (the file may stay, unlocked:
the next command takes it over). POSIX locks, unlike ``flock``, are also what NFS (lockd, NFSv4) and Lustre
(mounted with ``flock``) enforce between machines; on a filesystem without locks the command goes on with a
warning. A lock ends with :func:`release_all` (the ``veritune`` command line and the entry scripts call it when
the command ends) or with the process; the file is removed then.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from core.errors import UserError

LOCK_SUFFIX = ".veritune.lock"

# lock file -> its open descriptor, for every lock this process holds (POSIX locks belong to the process: taking
# one again from here must not open the file a second time, since closing any descriptor of it releases it)
_HELD: dict[Path, int] = {}
_COMMAND: list[str] = []


def lock_path(target: str | os.PathLike[str]) -> Path:
    """Where the lock of ``target`` (a folder or file, made yet or not) lies: ``PARENT/.<name>.veritune.lock``,
    after resolving links and relative spellings, so every spelling of one target shares one lock."""
    resolved = Path(target).resolve()
    if not resolved.name:
        raise UserError(f"{target}: the root folder cannot be written by a command; choose a folder of its own")
    return resolved.parent / f".{resolved.name}{LOCK_SUFFIX}"


def set_command(label: str) -> None:
    """Name this process's command in the locks it takes (default: the script's file name)."""
    _COMMAND[:] = [label]


def _command() -> str:
    return _COMMAND[0] if _COMMAND else Path(sys.argv[0] or "python").name


def hold_lock(target: str | os.PathLike[str], what: str, hint: str) -> Path:
    """Take the lock of ``target`` for this process until :func:`release_all` or the process's end; taken
    already by this process, nothing changes. Returns the lock file's path.

    ``what`` names the target in the refusal (``"--out outputs/finer"``), ``hint`` says what to do instead.

    Raises:
        UserError: ``"<what>: in use by <command> (pid N on HOST, since T); <hint>"`` while another process
            holds it.
    """
    path = lock_path(target)
    if path in _HELD:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EACCES, errno.EAGAIN):
                holder = _holder(fd)
                os.close(fd)
                raise UserError(f"{what}: in use by {holder}; {hint}") from None
            os.close(fd)
            if err.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                print(
                    f"warning: {path}: this filesystem takes no locks ({os.strerror(err.errno)}); a second command "
                    f"into {target} is not stopped",
                    file=sys.stderr,
                )
                return path
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed it as we opened it: lock the file there now
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": _command(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
    os.fsync(fd)
    _HELD[path] = fd
    return path


def _holder(fd: int, attempts: int = 20) -> str:
    """Who holds the lock, from its file (read through ``fd``; the holder writes it just after locking)."""
    for _ in range(attempts):
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
            return f"{record['command']} (pid {record['pid']} on {record['host']}, since {record['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return "another process"


def release_all() -> None:
    """Release every lock this process holds, removing their files."""
    for path, fd in list(_HELD.items()):
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                path.unlink()  # while locked: a process that opened it finds it gone and locks a new one
        except OSError:
            pass
        os.close(fd)
        del _HELD[path]


atexit.register(release_all)
