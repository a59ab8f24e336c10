"""Evaluate a model on several benchmarks and write ``OUT/<benchmark>/{predictions.jsonl,metrics.json}``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval_hooks.registry import get_benchmark
from eval_hooks.runner import PREDICTIONS_FILE, read_predictions, run_items
from veritune.errors import UserError
from veritune.io import atomic_write_json

METRICS_FILE = "metrics.json"


def resolve_paths(name: str, data_root: Path | None, data: dict[str, Path], image_root: Path | None) -> tuple[Path, Path | None]:
    """Where a benchmark's files are: an explicit ``--data name=PATH`` or its layout under ``--data-root``."""
    benchmark = get_benchmark(name)
    if name in data:
        return data[name], image_root
    if data_root is None:
        raise UserError(f"{name}: give --data-root DIR (expects {benchmark.data_layout}) or --data {name}=PATH")
    data_path, default_images = benchmark.default_paths(data_root)
    return data_path, image_root or default_images


def limit_items(items: list, limit: int | None) -> list:
    """The first ``limit`` questions (all paraphrases of a question stay together)."""
    if limit is None:
        return items
    keep, questions = [], []
    for item in items:
        question = item.id.split("/")[0] if "/p" in item.id else item.id
        if question not in questions:
            if len(questions) == limit:
                continue
            questions.append(question)
        keep.append(item)
    return keep


def score_benchmark(name: str, items: list, predictions: dict[str, str]) -> dict[str, Any]:
    """Score ``predictions`` against ``items``, checking that the ids belong to the benchmark."""
    known = {item.id for item in items}
    stray = [key for key in predictions if key not in known]
    if stray:
        raise UserError(
            f"{name}: {len(stray)} prediction id(s) are not in the benchmark, first: {', '.join(stray[:5])} "
            "(were they made on another file or subset?)"
        )
    result = get_benchmark(name).score(items, predictions)
    result["counts"]["predicted"] = sum(item.id in predictions for item in items)
    return result


def evaluate(
    model: Any,
    processor: Any,
    benchmarks: list[str],
    out_dir: Path,
    *,
    data_root: Path | None = None,
    data: dict[str, Path] | None = None,
    image_root: Path | None = None,
    limit: int | None = None,
    batch_size: int = 8,
) -> dict[str, dict[str, Any]]:
    """Run and score each benchmark; resumes from existing predictions files."""
    from accelerate import PartialState

    results = {}
    for name in benchmarks:
        benchmark = get_benchmark(name)
        data_path, images = resolve_paths(name, data_root, data or {}, image_root)
        items = limit_items(benchmark.load(data_path, images), limit)
        bench_dir = out_dir / name
        predictions = run_items(model, processor, items, bench_dir / PREDICTIONS_FILE, batch_size=batch_size, desc=name)
        if PartialState().is_main_process:
            result = score_benchmark(name, items, predictions)
            result["data"] = {"path": str(data_path), "image_root": str(images) if images else None, "limit": limit}
            atomic_write_json(bench_dir / METRICS_FILE, result)
            results[name] = result
    return results


def rescore(
    name: str, data_path: Path, predictions_path: Path, image_root: Path | None = None, limit: int | None = None
) -> dict[str, Any]:
    """Score an existing predictions file without loading any model (``veritune eval score``)."""
    items = limit_items(get_benchmark(name).load(data_path, image_root), limit)
    if not predictions_path.is_file():
        raise UserError(f"predictions file not found: {predictions_path}")
    return score_benchmark(name, items, read_predictions(predictions_path))
