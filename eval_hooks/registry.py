"""The benchmark registry: ``BENCHMARKS`` plus :func:`get_benchmark`, with a dotted-path fallback
(``my_pkg.my_module.MyBenchmark``) for experiments, named in a recipe key or a flag. A name read from a file or
a folder (a run's ``eval/checkpoint-N/<benchmark>/``, a ``metrics.json``) goes through
:func:`registered_benchmark`, which imports nothing: a folder's name never runs code.

Benchmarks register themselves: every module of ``eval_hooks/benchmarks/`` is imported, and each
:class:`Benchmark` subclass defined in it with its own ``name`` is registered under that name. A new
benchmark is therefore one module (plus its test and its row in docs/EVALUATION.md's table, which
``tests/test_benchmark_registry.py`` checks against ``BENCHMARKS``)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import eval_hooks.benchmarks
from core.errors import UserError
from core.registry import import_dotted
from eval_hooks.base import Benchmark


def discover_benchmarks() -> dict[str, type[Benchmark]]:
    """Every benchmark of ``eval_hooks/benchmarks/``: name -> class, in module order, then definition order
    within a module. Base classes without their own ``name`` (``VlmevalTsv``) are not benchmarks.

    Raises:
        RuntimeError: two benchmarks share a name (a programming error, not a user's).
    """
    found: dict[str, type[Benchmark]] = {}
    for info in sorted(pkgutil.iter_modules(eval_hooks.benchmarks.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{eval_hooks.benchmarks.__name__}.{info.name}")
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, Benchmark) and cls.__module__ == module.__name__):
                continue
            name = cls.__dict__.get("name")
            if not name:
                continue
            if name in found:
                raise RuntimeError(f"benchmark name {name!r} is defined twice: {found[name]} and {cls}")
            found[name] = cls
    return found


BENCHMARKS: dict[str, type[Benchmark]] = discover_benchmarks()


def get_benchmark(name: str) -> Benchmark:
    """A benchmark instance by registry name or dotted path to a :class:`Benchmark` subclass."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]()
    try:
        cls = import_dotted(name)
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        raise UserError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)} or a dotted path to a Benchmark")
    return cls()


def registered_benchmark(name: str, source: str | Path) -> Benchmark:
    """A benchmark instance by registry name only, for a ``name`` read from ``source`` (a file or a folder).

    Raises:
        UserError: ``name`` is not registered (a dotted path included: it is a recipe's or a flag's opt-in).
    """
    if name in BENCHMARKS:
        return BENCHMARKS[name]()
    raise UserError(
        f"{source}: {name!r} is not a registered benchmark (known: {', '.join(BENCHMARKS)}); a name read from a "
        "file or folder is never imported as a dotted path"
    )


# Named sets of benchmarks for eval_benchmarks / eval_final_benchmarks ("general:100" limits each member).
# general: the six general-ability benchmarks of FINER, arXiv 2603.17662, Sec. 4.4 and Table 3.
PRESETS: dict[str, tuple[str, ...]] = {"general": ("mmstar", "textvqa", "chartqa", "mmvp", "naturalbench", "vstar")}


def preset_members(name: str, limit: str = "") -> list[str] | None:
    """The benchmarks preset ``name`` stands for, each with ``:limit`` when one is given (``general:100`` limits
    every member); None when ``name`` is no preset."""
    members = PRESETS.get(name)
    if members is None:
        return None
    return [f"{member}:{limit}" if limit else member for member in members]
