"""The five question/answer templates of FINER App. G (reproduced exactly: they are the protocol) and the
composition of preference tuples from a positive phrase Ψ+ and its negative Ψ−.

Positive configuration: question X=Ψ+, chosen "Yes, ... Ψ+", rejected "No, but ... Ψ−".
Negative configuration: question X=Ψ−, chosen "No, but ... Ψ+", rejected "Yes, ... Ψ−".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (question with X, "yes" answer with Y, "no" answer with Z)
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("Does this image contain {x}?", "Yes, this image contains {y}.", "No, but this image contains {z}."),
    ("Does this image show {x}?", "Yes, this image shows {y}.", "No, but this image shows {z}."),
    ("Does this image include {x}?", "Yes, this image includes {y}.", "No, but this image includes {z}."),
    ("Can you see {x} in this image?", "Yes, I can see {y} in this image.", "No, but I can see {z} in this image."),
    ("Can {x} be seen in this image?", "Yes, {y} can be seen in this image.", "No, but {z} can be seen in this image."),
)


@dataclass
class Tuple:
    """One preference tuple before it is written: the question, the chosen and rejected answers."""

    subset: str  # obj | attr | rel | wh
    polarity: str  # pos | neg
    question: str
    chosen: str
    rejected: str
    template_id: int  # 1..5, 0 for WH (built without templates)


def compose(subset: str, positive: str, negative: str, rng: random.Random) -> list[Tuple]:
    """Both configurations for one (Ψ+, Ψ−) pair, each with a template drawn at random."""
    tuples = []
    for polarity in ("pos", "neg"):
        index = rng.randrange(len(TEMPLATES))
        question, yes, no = TEMPLATES[index]
        if polarity == "pos":
            tuples.append(Tuple(subset, polarity, question.format(x=positive), yes.format(y=positive), no.format(z=negative), index + 1))
        else:
            tuples.append(Tuple(subset, polarity, question.format(x=negative), no.format(z=positive), yes.format(y=negative), index + 1))
    return tuples


def compose_wh(question_pos: str, answer_pos: str, question_neg: str, answer_neg: str) -> list[Tuple]:
    """WH tuples, symmetrised: a−+ := a+− and a−− := a++ (FINER Sec. 3)."""
    return [
        Tuple("wh", "pos", question_pos, answer_pos, answer_neg, 0),
        Tuple("wh", "neg", question_neg, answer_neg, answer_pos, 0),
    ]
