"""Verifiable rewards for ORIC Visual-RFT (arXiv 2509.15695, Sec. 5).

Each sample's reward is ``accuracy + format`` with both weights 1, as in the paper. The answer is
parsed by :mod:`rewards.graders`, the same grader the ORIC-Bench and POPE scorers use.
"""

from __future__ import annotations

from typing import Any

from core.errors import UserError
from rewards.graders import (
    YesNo,
    extract_yes_no,
    grade_tagged_yes_no,
    has_reasoning_solution_format,
    normalize_yes_no_label,
)

# The ORIC record (training file and ORIC-Bench alike): its ``solution`` is what the accuracy reward verifies.
ORIC_FIELDS = ("id", "image", "target_object", "problem", "solution")


def check_oric_record(item: Any, where: str) -> YesNo:
    """The yes/no label of one ORIC record, after checking its fields.

    Raises:
        UserError: naming ``where`` (file and row): not an object, a field missing, or a solution that is not yes/no.
    """
    if not isinstance(item, dict):
        raise UserError(f"{where}: expected an object with fields {', '.join(ORIC_FIELDS)}")
    missing = [name for name in ORIC_FIELDS if name not in item]
    if missing:
        raise UserError(
            f"{where} (id {item.get('id', '?')}): missing field '{missing[0]}' "
            f"(ORIC records have {', '.join(ORIC_FIELDS)})"
        )
    label = normalize_yes_no_label(item["solution"])
    if label is None:
        raise UserError(f"{where} (id {item['id']}): solution {item['solution']!r} is not yes or no")
    return label


def accuracy_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the single ``<SOLUTION>`` block holds the one yes/no word equal to ``solution``.

    Args:
        completions: generated completions, conversational (``[{"role": "assistant", "content": ...}]``)
            or plain strings.
        solution: the ground truth per completion: ``yes``, ``no`` or ``<SOLUTION>yes</SOLUTION>``.

    Returns:
        One float per completion: 1.0 for a correct answer, 0.0 for anything else (no block, several
        blocks, an empty block, "yes or no", other text). None where the ground truth is not yes/no,
        so the sample is not rewarded on a label it cannot verify.

    Example:
        >>> accuracy_reward(["<REASONING>a cat</REASONING><SOLUTION> Yes. </SOLUTION>"], ["yes"])
        [1.0]
    """
    rewards: list[float | None] = []
    for completion, truth in zip(completions, solution, strict=False):
        label = normalize_yes_no_label(truth)
        if label is None:
            rewards.append(None)
            continue
        rewards.append(1.0 if grade_tagged_yes_no(completion) == label else 0.0)
    return rewards


def plain_accuracy_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when a plain answer ("Yes.", "No, there is not.") says the ``solution``, read by the free-form
    grader that scores ORIC-Bench's plain prompt (:func:`rewards.graders.extract_yes_no`); for models asked
    without the R1 tags (``prompt_template: plain``), such as the tiny miniature's. None where the ground
    truth is not yes/no.

    Example:
        >>> plain_accuracy_reward(["No, there is not.", "Yes.", "Maybe."], ["no", "no", "yes"])
        [1.0, 0.0, 0.0]
    """
    rewards: list[float | None] = []
    for completion, truth in zip(completions, solution, strict=False):
        label = normalize_yes_no_label(truth)
        rewards.append(None if label is None else 1.0 if extract_yes_no(completion) == label else 0.0)
    return rewards


def format_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion is exactly ``<REASONING>...</REASONING>`` (non-empty) followed by exactly
    one ``<SOLUTION>...</SOLUTION>``, with nothing but whitespace around them; else 0.0.

    Example:
        >>> format_reward([[{"role": "assistant", "content": "<REASONING>x</REASONING> <SOLUTION>no</SOLUTION>"}]])
        [1.0]
    """
    return [1.0 if has_reasoning_solution_format(c) else 0.0 for c in completions]
