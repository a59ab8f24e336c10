"""Progress bars that stay readable in log files.

On a terminal a tqdm bar redraws itself in place ten times a second. Written to a file (a Slurm log, a CI
log, ``2> run.log``) every redraw is one more ``\\r`` segment on the same line, so a long evaluation leaves
megabytes of them. :func:`progress_bar` keeps tqdm's behaviour on a terminal and redraws at most every
:data:`LOG_INTERVAL_S` seconds otherwise.
"""

from __future__ import annotations

import sys
from typing import Any

LOG_INTERVAL_S = 30.0  # seconds between redraws when stderr is not a terminal


def redraw_interval(stream: Any = None) -> float:
    """tqdm's ``mininterval`` for ``stream`` (default ``sys.stderr``): 0.1 s on a terminal, else
    :data:`LOG_INTERVAL_S`."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return 0.1 if callable(isatty) and isatty() else LOG_INTERVAL_S


def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """``tqdm(*args, **kwargs)``, redrawn at most every :data:`LOG_INTERVAL_S` seconds into a log file."""
    from tqdm import tqdm

    kwargs.setdefault("mininterval", redraw_interval(kwargs.get("file")))
    return tqdm(*args, **kwargs)
