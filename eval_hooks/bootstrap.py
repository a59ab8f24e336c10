"""Paired bootstrap intervals for the difference of a benchmark metric between two models on the same items.

The unit of resampling is the question: the paraphrases of one question (ids ``Q/p0`` ... ``Q/p3``, as
ORIC-Bench asks them) are drawn together, and so are the q+ and q- rows of a FINER pair (``meta["pair"]``), so
the interval reflects the number of distinct questions, not of prompts. Each resample draws questions with
replacement, scores both models' predictions on the same draw with the benchmark's own ``score`` and records
trained minus base; the interval is the percentile interval of those differences (Efron and Tibshirani, ch. 13).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import UserError
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.registry import get_benchmark

_PARAPHRASE_ID = re.compile(r"^(.*)/p\d+$")
# The one bootstrap of the run report (veritune/report.py) and the demo's results.json (miniature/pipeline.py):
# the same draws give the same interval wherever it is printed.
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by linear interpolation between order statistics (numpy's
    default ``linear`` method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def paired_bootstrap(
    statistic: Callable[[list[int]], float],
    units: int,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile interval of ``statistic`` over ``resamples`` draws of ``units`` unit indices with replacement.

    ``statistic(indices)`` returns the paired difference (trained minus base) on the drawn units.
    """
    values = _resample(lambda indices: (statistic(indices),), units, resamples, seed)
    return _interval([value[0] for value in values], confidence)


def _resample(
    statistic: Callable[[list[int]], tuple[float, ...]], units: int, resamples: int, seed: int
) -> list[tuple[float, ...]]:
    """``statistic`` on ``resamples`` draws of ``units`` indices with replacement, from ``random.Random(seed)``."""
    if units < 1:
        raise UserError("bootstrap: no questions to resample")
    rng = random.Random(seed)
    return [statistic([rng.randrange(units) for _ in range(units)]) for _ in range(resamples)]


def _interval(values: list[float], confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    return percentile(values, tail), percentile(values, 1 - tail)


def question_groups(items: list[EvalItem]) -> list[list[EvalItem]]:
    """Items grouped by question (paraphrases, and FINER's q+/q- pairs, together), in first-seen order."""
    groups: dict[str, list[EvalItem]] = {}
    for item in items:
        match = _PARAPHRASE_ID.match(item.id)
        key = item.meta.get("pair") if isinstance(item.meta, dict) and "pair" in item.meta else None
        groups.setdefault(str(key) if key is not None else match.group(1) if match else item.id, []).append(item)
    return list(groups.values())


def metric_difference_interval(
    benchmark_name: str,
    items: list[EvalItem],
    base: dict[str, str],
    trained: dict[str, str],
    metric: str,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """``{metric, base, trained, difference, low, high}`` for one metric of one benchmark: the point values
    on all items and the paired bootstrap interval of the difference, resampling questions."""
    return metric_difference_intervals(
        benchmark_name, items, base, trained, [metric], resamples=resamples, confidence=confidence, seed=seed
    )[0]


def metric_difference_intervals(
    benchmark_name: str,
    items: list[EvalItem],
    base: dict[str, str],
    trained: dict[str, str],
    metrics: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """:func:`metric_difference_interval` for several metrics of one benchmark, from one set of draws: each
    row is the one a call for that metric alone gives (the same ``seed`` draws the same questions), at the
    cost of one scoring per draw instead of one per metric."""
    benchmark = get_benchmark(benchmark_name)
    groups = question_groups(items)
    # per item, what a drawn copy's id is made of: "17/p2" drawn as copy 5 becomes "17#5/p2", so grouping stays
    parts = [
        [(item, *(item.id.rpartition("/p") if _PARAPHRASE_ID.match(item.id) else (item.id, "", ""))) for item in group]
        for group in groups
    ]

    def values_of(name: str, scored: dict[str, float]) -> tuple[float, ...]:
        for metric in metrics:
            if metric not in scored:
                raise UserError(f"{name}: no metric {metric!r} (has: {', '.join(sorted(scored)[:12])})")
        return tuple(float(scored[metric]) for metric in metrics)

    def values(chosen: list[EvalItem], predictions: dict[str, str]) -> tuple[float, ...]:
        return values_of(benchmark_name, benchmark.score(chosen, predictions)["metrics"])

    def draw(indices: list[int]) -> tuple[list[EvalItem], dict[str, str], dict[str, str]]:
        chosen, base_draw, trained_draw = [], {}, {}
        for copy, index in enumerate(indices):
            for item, head, sep, tail in parts[index]:
                new_id = f"{head}#{copy}{sep}{tail}"
                meta = item.meta
                if "pair" in meta:  # a drawn pair is a pair of its own, even when drawn twice
                    meta = {**meta, "pair": f"{meta['pair']}#{copy}"}
                chosen.append(  # built directly: dataclasses.replace is the slow part of a thousand draws
                    EvalItem(new_id, item.prompt, item.images, item.max_new_tokens, meta, item.missing_images)
                )
                if item.id in base:
                    base_draw[new_id] = base[item.id]
                if item.id in trained:
                    trained_draw[new_id] = trained[item.id]
        return chosen, base_draw, trained_draw

    def statistic(indices: list[int]) -> tuple[float, ...]:
        chosen, base_draw, trained_draw = draw(indices)
        after, before = values(chosen, trained_draw), values(chosen, base_draw)
        return tuple(a - b for a, b in zip(after, before))

    base_values, trained_values = values(items, base), values(items, trained)
    summed = _summed_statistic(benchmark, groups, base, trained, lambda scored: values_of(benchmark_name, scored))
    draws = _resample(summed or statistic, len(groups), resamples, seed)
    rows = []
    for column, metric in enumerate(metrics):
        low, high = _interval([value[column] for value in draws], confidence)
        rows.append(
            {
                "metric": metric,
                "base": base_values[column],
                "trained": trained_values[column],
                "difference": trained_values[column] - base_values[column],
                "low": low,
                "high": high,
                "questions": len(groups),
                "resamples": resamples,
            }
        )
    return rows


def _summed_statistic(
    benchmark: Benchmark,
    groups: list[list[EvalItem]],
    base: dict[str, str],
    trained: dict[str, str],
    values: Callable[[dict[str, float]], tuple[float, ...]],
) -> Callable[[list[int]], tuple[float, ...]] | None:
    """The draw statistic of :func:`metric_difference_intervals` for a benchmark with additive
    :meth:`~eval_hooks.base.Benchmark.counts`: each unit's integer tallies are counted once per model, and a
    draw's tallies are their sums weighted by how often each unit was drawn, which is what scoring the drawn
    copies counts; the metrics follow from them by the benchmark's own formulas, so the floats are the same as
    scoring each draw. None for a benchmark without counts, or whose ``score`` is overridden below them."""
    kind = type(benchmark)
    counted_by, scored_by = (next(c for c in kind.__mro__ if name in c.__dict__) for name in ("counts", "score"))
    if not issubclass(counted_by, scored_by):  # a subclass scoring its own way, with its parent's tallies
        return None
    tallies = [[benchmark.counts(group, predictions) for group in groups] for predictions in (base, trained)]
    if any(tally is None for side in tallies for tally in side):
        return None
    keys = list(dict.fromkeys(key for side in tallies for tally in side for key in tally))
    column = {key: number for number, key in enumerate(keys)}
    matrices = []
    for side in tallies:
        matrix = np.zeros((len(groups), len(keys)), dtype=np.int64)
        for row, tally in enumerate(side):
            for key, count in tally.items():
                matrix[row, column[key]] = count
        matrices.append(matrix)

    def statistic(indices: list[int]) -> tuple[float, ...]:
        weights = np.bincount(indices, minlength=len(groups))
        before, after = (
            values(benchmark.metrics_from_counts(dict(zip(keys, (weights @ matrix).tolist())))) for matrix in matrices
        )
        return tuple(a - b for a, b in zip(after, before))

    return statistic


def hook_difference_intervals(
    run_dir: Path, name: str, metrics: Sequence[str], steps: Sequence[int]
) -> tuple[list[EvalItem], dict[int, dict[str, str]], list[dict[str, Any]]]:
    """What the eval hook of a training run shows for benchmark ``name`` between the first and the last of
    ``steps`` (checkpoint steps, 0 the base model): the items it evaluated (as the last step's metrics.json
    records them: file, image root, limit and the limit's sample), its predictions at every step, and the
    paired intervals of ``metrics`` (:func:`metric_difference_intervals` with :data:`DEFAULT_RESAMPLES` and
    :data:`DEFAULT_SEED`).
    The one computation behind the report's before/after table and the demo's results.

    Raises:
        UserError: ``name`` (an eval folder's) is not a registered benchmark, or the metrics.json or the
            benchmark's files cannot be read.
    """
    import json

    from core.run_layout import checkpoint_eval_dir
    from eval_hooks.registry import registered_benchmark
    from eval_hooks.results import METRICS_FILE, prepare_as_evaluated
    from eval_hooks.runner import PREDICTIONS_FILE, read_predictions

    first, last = steps[0], steps[-1]
    registered_benchmark(name, checkpoint_eval_dir(run_dir, last) / name)  # a folder's name imports nothing
    metrics_file = checkpoint_eval_dir(run_dir, last) / name / METRICS_FILE
    try:
        result = json.loads(metrics_file.read_text(encoding="utf-8"))
        result["data"]["path"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{metrics_file}: no readable data record ({err})") from None
    prepared = prepare_as_evaluated(name, result, metrics_file.parent)  # the same files, limit, seed, mode: items
    predictions = {
        step: read_predictions(checkpoint_eval_dir(run_dir, step) / name / PREDICTIONS_FILE) for step in steps
    }
    # an item unanswered at either step (a partial evaluation, eval_allow_partial) is never scored as an answer
    items = [item for item in prepared.items if item.id in predictions[first] and item.id in predictions[last]]
    if not items:
        raise UserError(f"{name}: no item answered at both step {first} and step {last}")
    rows = metric_difference_intervals(name, items, predictions[first], predictions[last], metrics)
    return items, predictions, rows


def format_table(rows: list[dict[str, Any]], confidence: float = 0.95) -> str:
    """The before/after table as aligned text: benchmark/metric (or the row's ``label``), base, trained,
    difference, interval."""
    header = ("metric", "base", "trained", "difference", f"{round(confidence * 100)}% interval")
    lines = [header] + [
        (
            row.get("label") or f"{row['benchmark']} {row['metric']}",
            f"{row['base']:.1f}",
            f"{row['trained']:.1f}",
            f"{row['difference']:+.1f}",
            f"[{row['low']:+.1f}, {row['high']:+.1f}]",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
