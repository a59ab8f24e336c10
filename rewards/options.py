"""Option rewards for multiple-choice questions: the multi-image rows of GRPO ("Fine-Grained Multi-Image Object
Hallucination Benchmark", MIOH, Sec. 3, Table 1 and Fig. 2: a question over several images, lettered options, one right
letter). The letter is read by :func:`rewards.graders.extract_option`, the grader the MIOH scorer uses, so a
letter earns the reward exactly when MIOH would count it right.

A row's ``options`` column is the JSON text of its ``{letter: text}`` options (``""`` on a yes/no row, which
these rewards leave unscored: None), its ``solution`` the right letter.
"""

from __future__ import annotations

import json
from typing import Any

from rewards.graders import completion_text, extract_option, solution_blocks


def row_options(options: Any) -> dict[str, str] | None:
    """A row's ``{letter: text}`` options from its ``options`` cell (JSON text or a mapping); None when it has none."""
    if isinstance(options, str):
        if not options.strip():
            return None
        try:
            options = json.loads(options)
        except ValueError:
            return None
    if not isinstance(options, dict) or not options:
        return None
    return {str(letter): str(text) for letter, text in options.items() if text is not None}


def _scores(answers: list[Any], solution: list[Any], options: list[Any] | None) -> list[float | None]:
    rewards: list[float | None] = []
    for index, (answer, truth) in enumerate(zip(answers, solution, strict=False)):
        choices = row_options(options[index]) if options is not None and index < len(options) else None
        if choices is None or str(truth).strip().upper() not in choices:
            rewards.append(None)
            continue
        letter, _ = extract_option(answer, choices) if answer is not None else (None, "unresolved")
        rewards.append(1.0 if letter == str(truth).strip().upper() else 0.0)
    return rewards


def option_accuracy_reward(
    completions: list[Any], solution: list[Any], options: list[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 when the single ``<SOLUTION>`` block of an R1-style answer picks the right option (read by the option
    grader); 0.0 for no block, several blocks or another letter. None on rows without options.

    Example:
        >>> option_accuracy_reward(["<REASONING>x</REASONING><SOLUTION>B</SOLUTION>"], ["B"], ['{"A": "1", "B": "2"}'])
        [1.0]
    """
    answers = []
    for completion in completions:
        blocks = solution_blocks(completion_text(completion) or "")
        answers.append(blocks[0] if len(blocks) == 1 else None)
    return _scores(answers, solution, options)


def plain_option_accuracy_reward(
    completions: list[Any], solution: list[Any], options: list[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 when a plain answer ("B", "The answer is B", an option's text) picks the right option, read as the MIOH
    scorer reads it (``prompt_template: plain``). None on rows without options.

    Example:
        >>> plain_option_accuracy_reward(["(b)", "A"], ["B", "B"], ['{"A": "1", "B": "2"}'] * 2)
        [1.0, 0.0]
    """
    return _scores([completion_text(c) for c in completions], solution, options)
