"""Console lines of the libraries underneath that tell a veritune user nothing, kept off the console.

- transformers prints ``[INFO] Running in WANDB offline mode`` when its W&B integration is imported with
  ``WANDB_MODE=offline``, which every recipe parse does (``TrainingArguments.__post_init__`` imports it), even
  ``veritune slurm submit --dry-run``: :func:`hide_wandb_offline_banner`.
- DeepSpeed warns, once per process, that it "was unable to detect" an accelerator when there is none (any
  transformers model import loads it): :func:`use_cpu_accelerator_without_gpu`.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

WANDB_OFFLINE_BANNER = "[INFO] Running in WANDB offline mode"
BANNER_MODULE = "transformers.integrations.integration_utils"


class _BannerFilter(importlib.abc.MetaPathFinder):
    """Finds :data:`BANNER_MODULE` as Python would, and runs its module code with stdout captured: what it
    printed goes on to stdout afterwards, less the banner."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != BANNER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> Any:
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    return run(module)
            finally:
                sys.stdout.write(printed.getvalue().replace(WANDB_OFFLINE_BANNER + "\n", "", 1))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def hide_wandb_offline_banner() -> None:
    """Drop transformers' ``[INFO] Running in WANDB offline mode`` line from this process's stdout (W&B's own
    offline notice at a run's start and end stays). Costs nothing until transformers' W&B integration is
    imported; no effect when it already is."""
    if BANNER_MODULE in sys.modules or any(isinstance(finder, _BannerFilter) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _BannerFilter())


def use_cpu_accelerator_without_gpu() -> None:
    """DeepSpeed warns on import, once per process, that it "was unable to detect" an accelerator when there
    is none; on a CPU-only machine say so up front (``DS_ACCELERATOR=cpu``), which is what it falls back to."""
    if "DS_ACCELERATOR" not in os.environ and "deepspeed" not in sys.modules:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"
