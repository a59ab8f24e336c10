"""User-facing errors: a mistake in the user's input is one clear line and a non-zero exit, never a
Python traceback."""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130
# Set by `veritune launch` for its workers: a worker of rank > 0 writes its error line into this folder
# (rank<N>.txt) instead of stderr, so that a mistake every rank meets is printed once, by rank 0, and the
# launcher prints a non-main rank's line only when rank 0 printed none.
WORKER_ERROR_DIR_ENV = "VERITUNE_WORKER_ERRORS"
# Set by a veritune process for the veritune processes it starts (`veritune launch` for its workers, the demo
# for its stages): Ctrl-C reaches the whole process group, and the parent, the command the user typed, says
# "interrupted" once; a child exits with the same status without saying it again.
PARENT_SAYS_INTERRUPTED_ENV = "VERITUNE_PARENT_SAYS_INTERRUPTED"
INTERRUPTED_LINE = "interrupted: finished work is kept; rerun the same command to resume"


class UserError(Exception):
    """Bad input from the user (a file, row, key or option). The message names what is wrong and where."""


# What to do about an OS error on a path the user gave, by exception type (checked in order).
_OS_ERROR_ADVICE: tuple[tuple[type[OSError], str], ...] = (
    (PermissionError, "permission denied; choose a path you can access or change its permissions"),
    (NotADirectoryError, "a part of this path is a regular file, not a directory; choose another path"),
    (IsADirectoryError, "is a directory where a file is expected; give a file path"),
    (FileExistsError, "already exists and is not what this command expects; choose another path or remove it"),
    (FileNotFoundError, "not found; check the path"),
)
_ERRNO_ADVICE = {
    errno.ENOSPC: "no space left on the device; free some space or choose another location",
    errno.EROFS: "read-only file system; choose a writable location",
    errno.ENAMETOOLONG: "file name too long; choose a shorter path",
    errno.EDQUOT: "disk quota exceeded; free some space or choose another location",
}


def os_error_message(err: OSError) -> str:
    """One line for an OS error: the path it concerns, what went wrong and what to do."""
    path = err.filename if err.filename is not None else None
    advice = _ERRNO_ADVICE.get(err.errno or -1)
    if advice is None:
        advice = next((text for kind, text in _OS_ERROR_ADVICE if isinstance(err, kind)), None)
    if advice is None:
        text = str(err).strip()
        advice = (err.strerror or (text.splitlines()[0] if text else type(err).__name__)).rstrip(".")
    if path is None:
        return advice
    target = f"{path} -> {err.filename2}" if err.filename2 is not None else str(path)
    return f"{target}: {advice}"


def _open_file_in(tb: TracebackType | None) -> str | None:
    """The name of the innermost text file being read where a decoding error was raised, if any."""
    names = []
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, io.TextIOWrapper) and isinstance(getattr(value, "name", None), str):
                names.append(value.name)
        tb = tb.tb_next
    return names[-1] if names else None


def decode_error_message(err: UnicodeDecodeError, path: str | None = None) -> str:
    """One line for a file that is not UTF-8 text, naming the file and the first bad byte."""
    where = f"{path}: " if path else ""
    return (
        f"{where}not UTF-8 text (byte {err.object[err.start : err.start + 1]!r} at offset {err.start}); "
        "save the file as UTF-8"
    )


def close_progress_bars() -> None:
    """Close every open tqdm bar now, so that the ``error:`` line is the last line printed (an unclosed bar is
    otherwise redrawn when it is garbage-collected, after the error)."""
    tqdm_module = sys.modules.get("tqdm")
    if tqdm_module is None:
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        try:
            bar.close()
        except Exception:  # noqa: BLE001 - a bar that cannot close must not hide the error
            pass
    sys.stderr.flush()


def _worker_error(message: str, *, printed: bool) -> bool:
    """Under `veritune launch` (:data:`WORKER_ERROR_DIR_ENV`), note a worker's error line for the launcher:
    rank 0 prints it and leaves a mark that it did; another rank prints nothing and leaves the line, which the
    launcher prints only when rank 0 printed none. True when this worker should not print."""
    folder, rank = os.environ.get(WORKER_ERROR_DIR_ENV), os.environ.get("RANK")
    if not folder or not rank or not rank.isdigit() or not os.path.isdir(folder):
        return False
    if printed != (rank == "0"):
        return rank != "0"
    try:
        with open(os.path.join(folder, f"rank{int(rank)}.txt"), "w", encoding="utf-8") as handle:
            handle.write(f"error: {message}\n")
    except OSError:
        return False
    return rank != "0"


def _finish_wandb_run(exit_code: int) -> None:
    """End this process's W&B run, if it has one, before the process exits: W&B's own exit hook would print its
    closing lines with colour codes even into a log file."""
    wandb = sys.modules.get("wandb")  # not imported: no run to finish
    if wandb is not None and getattr(wandb, "run", None) is not None:
        with contextlib.suppress(Exception, KeyboardInterrupt):  # a second Ctrl-C, or W&B failing, still exits
            wandb.finish(exit_code=exit_code)


def exit_on_user_error(func: F) -> F:
    """Run ``func``; print a :class:`UserError` as ``error: ...`` on stderr and exit with code 2.

    OS errors (a path that cannot be read or written: missing, not a directory, a directory, no
    permission, disk full) and files that are not UTF-8 are user errors too: one line naming the path
    and what to do, exit 2. Ctrl-C prints one line and exits 130: builders and evaluators keep what they
    finished, so a rerun resumes from there (in a process started by another veritune process,
    :data:`PARENT_SAYS_INTERRUPTED_ENV`, the parent prints that line).
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as err:
            message = str(err)
        except OSError as err:
            message = os_error_message(err)
        except UnicodeDecodeError as err:
            message = decode_error_message(err, _open_file_in(err.__traceback__))
        except KeyboardInterrupt:
            close_progress_bars()
            _finish_wandb_run(INTERRUPTED_EXIT_CODE)
            if not os.environ.get(PARENT_SAYS_INTERRUPTED_ENV):
                print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
            sys.exit(INTERRUPTED_EXIT_CODE)
        close_progress_bars()
        if _worker_error(message, printed=False):
            sys.exit(USER_ERROR_EXIT_CODE)
        # One write: processes that print at once (outside `veritune launch`) are never interleaved, as a
        # single write of under 4 KiB to a pipe is atomic.
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
        _worker_error(message, printed=True)
        sys.exit(USER_ERROR_EXIT_CODE)

    return wrapper  # type: ignore[return-value]
