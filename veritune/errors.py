"""User-facing errors: a mistake in the user's input is one clear line and a non-zero exit, never a
Python traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130


class UserError(Exception):
    """Bad input from the user (a file, row, key or option). The message names what is wrong and where."""


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


def exit_on_user_error(func: F) -> F:
    """Run ``func``; print a :class:`UserError` as ``error: ...`` on stderr and exit with code 2.

    Ctrl-C prints one line and exits 130: builders and evaluators keep what they finished, so a rerun
    resumes from there.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as err:
            close_progress_bars()
            print(f"error: {err}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT_CODE)
        except KeyboardInterrupt:
            close_progress_bars()
            print("interrupted: finished work is kept; rerun the same command to resume", file=sys.stderr)
            sys.exit(INTERRUPTED_EXIT_CODE)

    return wrapper  # type: ignore[return-value]
