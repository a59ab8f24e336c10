"""Rewards used only by the learning test: simple, verifiable, reachable by a tiny model."""

from __future__ import annotations

from typing import Any

from rewards.graders import grade_tagged_yes_no


def answers_no_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's tagged answer is "no", whatever the question."""
    return [1.0 if grade_tagged_yes_no(c) == "no" else 0.0 for c in completions]


def _text(completion: Any) -> str:
    if isinstance(completion, list):
        return " ".join(str(message.get("content", "")) for message in completion if isinstance(message, dict))
    return str(completion)


def constant_on_yes_reward(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float]:
    """1.0 on every completion of a question whose answer is "yes" (a group with zero spread: no signal);
    elsewhere 0 or 1 by a hash of the completion's text (sampled completions differ, so the groups spread).
    Logs each completion's question id to the completion table."""
    import zlib

    log_extra = kwargs.get("log_extra")
    if log_extra is not None and "id" in kwargs:  # which question each trained completion answers
        log_extra("question_id", [str(question) for question in kwargs["id"]])
    return [
        1.0 if "yes" in str(answer).lower() else float(zlib.crc32(_text(c).encode()) % 2)
        for c, answer in zip(completions, solution, strict=True)
    ]
