"""A training run that takes more CPU threads once a file says so (``VERITUNE_THREADS_FILE``).

On a CPU, two runs side by side each keep one torch thread; when one of them ends, the other may use the core it
leaves. The process that knows (the CPU miniature's demo, ``miniature.pipeline``) writes a thread count into a
file; every entry script whose environment names that file checks it before each step and, once it is there,
calls ``torch.set_num_threads`` with it, once. The count of intra-op threads changes how fast a step runs, not what
it computes on the machines measured (docs/LAB_NOTEBOOK.md, "The idle core, given to DPO": the same weights, byte
for byte, on one thread and on two).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger("veritune.train")

THREADS_FILE_ENV = "VERITUNE_THREADS_FILE"


def read_thread_count(path: Path) -> int | None:
    """The thread count written in ``path``; None while it is absent, empty or not a positive integer (it may be
    being written)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


class ThreadsFromFile(TrainerCallback):
    """Before each step, until it has done so once: set torch's intra-op threads to the count in ``path``, if the
    file is there."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.applied: int | None = None

    def check(self) -> None:
        if self.applied is not None:
            return
        count = read_thread_count(self.path)
        if count is None:
            return
        import torch

        before = torch.get_num_threads()
        if count != before:
            torch.set_num_threads(count)
            logger.info("torch threads: %d -> %d (%s)", before, count, self.path)
        self.applied = count

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.check()


def threads_callback() -> ThreadsFromFile | None:
    """The callback for the file ``VERITUNE_THREADS_FILE`` names, None when it names none."""
    path = os.environ.get(THREADS_FILE_ENV)
    return ThreadsFromFile(Path(path)) if path else None
