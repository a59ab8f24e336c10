"""The shared cache (``~/.cache/veritune``, or ``$VERITUNE_CACHE``): entries that any number of processes and
checkouts on one machine may build at once, and that a killed process never leaves half-written.

An entry is a directory ``<cache>/<kind>/<key>``, its key a hash of everything that makes it. A writer builds
its copy in a temporary directory of its own beside the entry (``.<key>.<pid>-<random>.tmp``: two writers
never share one), then renames it into place: the rename is atomic, so an entry that exists is complete.
When another writer got there first, its entry is kept, the late copy dropped and the entry used. A temporary
directory left by a killed writer is never read; it is removed by the next writer once its process is gone
(same host), or once it is a day old.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

STALE_AFTER_S = 24 * 3600  # a temporary entry this old is removed whoever wrote it


def cache_root() -> Path:
    """``$VERITUNE_CACHE``, else ``~/.cache/veritune``."""
    return Path(os.environ.get("VERITUNE_CACHE") or Path.home() / ".cache" / "veritune")


def _temporary_name(entry: Path) -> str:
    return f".{entry.name}.{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"


def _writer_gone(temporary: Path, entry: Path) -> bool:
    """The process that writes ``temporary`` has ended (same host), or it is older than :data:`STALE_AFTER_S`."""
    try:
        age = time.time() - temporary.lstat().st_mtime
    except FileNotFoundError:
        return False
    if age > STALE_AFTER_S:
        return True
    writer = temporary.name.removeprefix(f".{entry.name}.").removesuffix(".tmp")
    host, _, rest = writer.rpartition("-")[0].rpartition("-")
    if host != socket.gethostname() or not rest.isdigit():
        return False
    try:
        os.kill(int(rest), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user: alive
        return False
    return False


def remove_stale_temporaries(entry: Path) -> None:
    """Remove the temporary directories of ``entry`` whose writers are gone (see the module docstring), and
    the ``<key>.tmp`` an older veritune left behind once it is a day old."""
    parent = entry.parent
    if not parent.is_dir():
        return
    for temporary in parent.glob(f".{entry.name}.*.tmp"):
        if _writer_gone(temporary, entry):
            shutil.rmtree(temporary, ignore_errors=True)
    legacy = parent / f"{entry.name}.tmp"
    try:
        if time.time() - legacy.lstat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(legacy, ignore_errors=True)
    except FileNotFoundError:
        pass


def publish_dir(source: Path, entry: Path) -> bool:
    """Copy the directory ``source`` into the cache as ``entry``, atomically; True when this copy became the
    entry, False when another writer's complete entry was already there (this copy is then dropped)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(entry)
    if entry.is_dir():
        return False
    temporary = entry.parent / _temporary_name(entry)
    try:
        shutil.copytree(source, temporary)
        try:
            os.rename(temporary, entry)  # atomic; fails when another writer's entry (never empty) is there
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not entry.is_dir():
                raise
            return False
        return True
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)
