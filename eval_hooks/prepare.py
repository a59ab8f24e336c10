"""A benchmark prepared to run: located (:mod:`eval_hooks.paths`), loaded and limited (its items, a limit's
selection: :mod:`eval_hooks.selection`) before any model is loaded, so that a wrong path fails in a second."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.paths import ImageRoots, resolve_paths
from eval_hooks.registry import get_benchmark
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED, select_items


@dataclass
class PreparedBenchmark:
    """A benchmark's items, ready to run: where they came from and how many were kept."""

    name: str
    benchmark: Benchmark
    items: list[EvalItem]
    data_path: Path
    image_root: Path | None
    limit: int | None = None
    max_new_tokens: int | None = None
    strict_official: bool = False
    allow_partial: bool = False  # score the answered items only, labelled partial (eval_hooks.evaluate.score_benchmark)
    allow_unresolved: bool = False  # score a mostly unresolved result, labelled (eval_hooks.coverage.check_unresolved)
    selection: dict[str, Any] = field(default_factory=dict)  # what the limit kept (eval_hooks.selection)


def load_items(name: str, benchmark: Benchmark, data_path: Path, image_root: Path | None) -> list[EvalItem]:
    """The benchmark's items from its files, refused when two share an id (predictions are keyed by id, so
    a repeated id would let one answer overwrite another). Every run, watch, hook and rescore loads here."""
    items = benchmark.load(data_path, image_root)
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise UserError(
                f"{name}: {data_path}: item id {item.id!r} occurs more than once; "
                "ids must be unique (predictions are keyed by them)"
            )
        seen.add(item.id)
    return items


def prepare_benchmark(
    name: str,
    *,
    data_root: Path | None = None,
    data: dict[str, Path] | None = None,
    image_root: Path | ImageRoots | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    strict_official: bool = False,
    allow_partial: bool = False,
    limit_seed: int = DEFAULT_LIMIT_SEED,
    limit_mode: str = DEFAULT_LIMIT_MODE,
    allow_unresolved: bool = False,
) -> PreparedBenchmark:
    """Locate and load one benchmark, keep the items of ``limit`` questions (a stratified sample drawn with
    ``limit_seed``, or with ``limit_mode="first"`` the first ones: :func:`eval_hooks.selection.select_items`),
    set the generation budget; ``strict_official``: score exactly as the official script (see
    :func:`eval_hooks.evaluate.score_benchmark`); ``allow_partial``: score the answered items only, labelled partial;
    ``allow_unresolved``: score a result whose answers are mostly unresolved, labelled
    (:func:`eval_hooks.coverage.check_unresolved`)."""
    benchmark = get_benchmark(name)
    data_path, images = resolve_paths(name, data_root, data or {}, image_root)
    if not data_path.exists():
        raise UserError(f"{name}: {data_path} not found (expected {benchmark.data_layout or 'the benchmark file'})")
    items, selection = select_items(
        benchmark, load_items(name, benchmark, data_path, images), limit, seed=limit_seed, mode=limit_mode
    )
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise UserError(f"--max-new-tokens: must be at least 1, got {max_new_tokens}")
        for item in items:
            item.max_new_tokens = max_new_tokens
    return PreparedBenchmark(
        name,
        benchmark,
        items,
        data_path,
        images,
        limit,
        max_new_tokens,
        strict_official,
        allow_partial=allow_partial,
        allow_unresolved=allow_unresolved,
        selection=selection,
    )


def prepare_benchmarks(names: list[str], **kwargs: Any) -> list[PreparedBenchmark]:
    """:func:`prepare_benchmark` for each name (every bad name or path is reported before a model loads)."""
    return [prepare_benchmark(name, **kwargs) for name in names]
