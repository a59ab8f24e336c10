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
from typing import Any

from eval_hooks.base import EvalItem
from eval_hooks.registry import get_benchmark
from veritune.core.errors import UserError

_PARAPHRASE_ID = re.compile(r"^(.*)/p\d+$")
DEFAULT_RESAMPLES = 1000


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
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of ``statistic`` over ``resamples`` draws of ``units`` unit indices with replacement.

    ``statistic(indices)`` returns the paired difference (trained minus base) on the drawn units.
    """
    if units < 1:
        raise UserError("bootstrap: no questions to resample")
    rng = random.Random(seed)
    values = [statistic([rng.randrange(units) for _ in range(units)]) for _ in range(resamples)]
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
    seed: int = 0,
) -> dict[str, Any]:
    """``{metric, base, trained, difference, low, high}`` for one metric of one benchmark: the point values
    on all items and the paired bootstrap interval of the difference, resampling questions."""
    benchmark = get_benchmark(benchmark_name)
    groups = question_groups(items)

    def value(chosen: list[EvalItem], predictions: dict[str, str]) -> float:
        metrics = benchmark.score(chosen, predictions)["metrics"]
        if metric not in metrics:
            raise UserError(f"{benchmark_name}: no metric {metric!r} (has: {', '.join(sorted(metrics)[:12])})")
        return float(metrics[metric])

    def draw(indices: list[int]) -> tuple[list[EvalItem], dict[str, str], dict[str, str]]:
        chosen, base_draw, trained_draw = [], {}, {}
        for copy, index in enumerate(indices):
            for item in groups[index]:
                # A copy keeps its paraphrase suffix ("17/p2" -> "17#5/p2") so grouping stays intact.
                head, sep, tail = item.id.rpartition("/p") if _PARAPHRASE_ID.match(item.id) else (item.id, "", "")
                new_id = f"{head}#{copy}{sep}{tail}"
                meta = dict(item.meta)
                if "pair" in meta:  # a drawn pair is a pair of its own, even when drawn twice
                    meta["pair"] = f"{meta['pair']}#{copy}"
                chosen.append(  # built directly: dataclasses.replace is the slow part of a thousand draws
                    EvalItem(new_id, item.prompt, item.images, item.max_new_tokens, meta, item.missing_images)
                )
                if item.id in base:
                    base_draw[new_id] = base[item.id]
                if item.id in trained:
                    trained_draw[new_id] = trained[item.id]
        return chosen, base_draw, trained_draw

    def statistic(indices: list[int]) -> float:
        chosen, base_draw, trained_draw = draw(indices)
        return value(chosen, trained_draw) - value(chosen, base_draw)

    base_value, trained_value = value(items, base), value(items, trained)
    low, high = paired_bootstrap(statistic, len(groups), resamples=resamples, confidence=confidence, seed=seed)
    return {
        "metric": metric,
        "base": base_value,
        "trained": trained_value,
        "difference": trained_value - base_value,
        "low": low,
        "high": high,
        "questions": len(groups),
        "resamples": resamples,
    }


def format_table(rows: list[dict[str, Any]], confidence: float = 0.95) -> str:
    """The before/after table as aligned text: benchmark/metric, base, trained, difference, interval."""
    header = ("metric", "base", "trained", "difference", f"{round(confidence * 100)}% interval")
    lines = [header] + [
        (
            f"{row['benchmark']} {row['metric']}",
            f"{row['base']:.1f}",
            f"{row['trained']:.1f}",
            f"{row['difference']:+.1f}",
            f"[{row['low']:+.1f}, {row['high']:+.1f}]",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
