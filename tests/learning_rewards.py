"""Rewards used only by the learning test: simple, verifiable, reachable by a tiny model."""

from __future__ import annotations

from typing import Any

from rewards.graders import grade_tagged_yes_no


def answers_no_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's tagged answer is "no", whatever the question."""
    return [1.0 if grade_tagged_yes_no(c) == "no" else 0.0 for c in completions]
