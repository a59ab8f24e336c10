"""Console lines of the libraries underneath that tell a veritune user nothing, kept off the console.

- transformers prints ``[INFO] Running in WANDB offline mode`` when its W&B integration is imported with
  ``WANDB_MODE=offline``, which every recipe parse does (``TrainingArguments.__post_init__`` imports it), even
  ``veritune slurm submit --dry-run``: :func:`hide_wandb_offline_banner`.
- DeepSpeed warns, once per process, that it "was unable to detect" an accelerator when there is none (any
  transformers model import loads it): :func:`use_cpu_accelerator_without_gpu`.
- transformers draws a bar each time a model is loaded or saved ("Loading weights", "Writing model shards"),
  in every command and at every checkpoint: :func:`hide_model_file_bars`.
- W&B prints the run's sampled history and summary (about 30 lines, profiling timers included) when a run
  finishes: :func:`quiet_wandb`.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

WANDB_OFFLINE_BANNER = "[INFO] Running in WANDB offline mode"
BANNER_MODULE = "transformers.integrations.integration_utils"


class _OnImport(importlib.abc.MetaPathFinder):
    """Finds the module ``name`` as Python would, and runs its module code as ``run_module(exec_module, module)``
    does (``exec_module``: the loader's own), so a module's import can be wrapped without changing its code."""

    def __init__(self, name: str, run_module: Callable[[Callable[[ModuleType], Any], ModuleType], Any]) -> None:
        self.name = name
        self.run_module = run_module

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> Any:
            return self.run_module(run, module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _watch_import(name: str, run_module: Callable[[Callable[[ModuleType], Any], ModuleType], Any]) -> None:
    """Run module ``name``'s code through ``run_module`` when it is first imported (once per process)."""
    if not any(isinstance(finder, _OnImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(name, run_module))


def _run_without_banner(run: Callable[[ModuleType], Any], module: ModuleType) -> Any:
    """Run :data:`BANNER_MODULE`'s code with stdout captured: what it printed goes on to stdout afterwards, less
    the banner."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return run(module)
    finally:
        sys.stdout.write(printed.getvalue().replace(WANDB_OFFLINE_BANNER + "\n", "", 1))


def hide_wandb_offline_banner() -> None:
    """Drop transformers' ``[INFO] Running in WANDB offline mode`` line from this process's stdout (W&B's own
    offline notice at a run's start and end stays). Costs nothing until transformers' W&B integration is
    imported; no effect when it already is."""
    if BANNER_MODULE not in sys.modules:
        _watch_import(BANNER_MODULE, _run_without_banner)


def use_cpu_accelerator_without_gpu() -> None:
    """DeepSpeed warns on import, once per process, that it "was unable to detect" an accelerator when there
    is none; on a CPU-only machine say so up front (``DS_ACCELERATOR=cpu``), which is what it falls back to."""
    if "DS_ACCELERATOR" not in os.environ and "deepspeed" not in sys.modules:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


TRANSFORMERS_LOGGING = "transformers.utils.logging"


def _model_file_bars_off(transformers_logging: ModuleType) -> None:
    import huggingface_hub.utils as hub_utils

    downloads = not hub_utils.are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()  # also turns the Hub's off: turned back on below
    if downloads:
        hub_utils.enable_progress_bars()


def _run_then_bars_off(run: Callable[[ModuleType], Any], module: ModuleType) -> Any:
    """Run :data:`TRANSFORMERS_LOGGING`'s code, then turn its bars off."""
    result = run(module)
    _model_file_bars_off(module)
    return result


def hide_model_file_bars() -> None:
    """No transformers progress bar for loading or saving a model's weights (``Loading weights``, ``Writing model
    shards``); the Hub's download bars stay as ``HF_HUB_DISABLE_PROGRESS_BARS`` says. Costs nothing until
    transformers is imported."""
    if TRANSFORMERS_LOGGING in sys.modules:
        _model_file_bars_off(sys.modules[TRANSFORMERS_LOGGING])
    else:
        _watch_import(TRANSFORMERS_LOGGING, _run_then_bars_off)


def quiet_wandb() -> None:
    """W&B's ``quiet`` setting (``WANDB_QUIET``) unless the environment sets it: no sampled history or summary
    when a run finishes; its warnings, errors and the run's link stay."""
    os.environ.setdefault("WANDB_QUIET", "true")
