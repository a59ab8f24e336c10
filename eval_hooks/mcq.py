"""Multiple-choice helpers shared by the MCQ benchmarks (FINER, MIOH, VLMEvalKit TSV suites): the option
block of a prompt (:mod:`core.mcq_format`, the format's home), letter grading through the one option grader
in :mod:`rewards.graders`, and accuracy tables."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from core.mcq_format import OPTION_LETTERS, letter_list, lettered, option_block
from eval_hooks.base import EvalItem
from rewards.graders import extract_option

__all__ = [
    "OPTION_LETTERS",
    "accuracy_table",
    "grade_letters",
    "letter_list",
    "lettered",
    "option_block",
    "resolution_shares",
]


def grade_letters(items: list[EvalItem], predictions: dict[str, str]) -> tuple[dict[str, bool], Counter[str]]:
    """Per item: is the chosen letter ``meta["answer"]``? Plus how each answer was resolved (``letter``,
    ``option_text``, ``unresolved``, ``missing_image``, ``no_prediction``). An item whose image is missing,
    or that has no prediction, is wrong."""
    correct: dict[str, bool] = {}
    resolution: Counter[str] = Counter()
    for item in items:
        if item.missing_images:
            resolution["missing_image"] += 1
            correct[item.id] = False
            continue
        if item.id not in predictions:
            resolution["no_prediction"] += 1
            correct[item.id] = False
            continue
        letter, rule = extract_option(predictions[item.id], item.meta["options"])
        resolution[rule] += 1
        correct[item.id] = letter == item.meta["answer"]
    return correct, resolution


def accuracy_table(
    items: list[EvalItem], correct: dict[str, bool], key: Callable[[EvalItem], Any], column: str
) -> list[dict[str, Any]]:
    """Accuracy (percent) and question count per value of ``key(item)``, in first-seen order."""
    groups: dict[Any, list[bool]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(correct[item.id])
    return [
        {column: value, "questions": len(flags), "accuracy": 100 * sum(flags) / len(flags)}
        for value, flags in groups.items()
    ]


def resolution_shares(resolution: Counter[str]) -> dict[str, float]:
    """Each resolution step's share (percent) of the items, as ``resolved/<step>``."""
    total = sum(resolution.values())
    return {f"resolved/{step}": 100 * count / total for step, count in sorted(resolution.items())} if total else {}
