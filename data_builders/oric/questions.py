"""ORIC question wording: the four paraphrases asked of every object, and the R1-style training prompt
(seed Fig. 11). The public ORIC release carries these texts verbatim, so they are reproduced exactly."""

from __future__ import annotations

import functools

from core.prompts import with_r1_instruction

PARAPHRASES = (
    "Is there {object} in the image?",
    "Does the image contain {object}?",
    "Have you noticed {object} in the image?",
    "Can you see {object} in the image?",
)


def with_article(name: str) -> str:
    """``a cup``, ``an umbrella``.

    >>> with_article("apple"), with_article("traffic light")
    ('an apple', 'a traffic light')
    """
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def paraphrases(name: str) -> list[str]:
    """The four ORIC-Bench questions about ``name``."""
    return list(shared_paraphrases(name))


@functools.lru_cache(maxsize=4096)  # a build asks about the same few classes over and over
def shared_paraphrases(name: str) -> tuple[str, ...]:
    """:func:`paraphrases` as one tuple shared by every record about ``name`` (JSON writes it as a list): no new
    container per record for the garbage collector to walk."""
    return tuple(template.format(object=with_article(name)) for template in PARAPHRASES)


def r1_prompt(name: str) -> str:
    """The training prompt: the first paraphrase followed by the R1-style instruction."""
    return with_r1_instruction(paraphrases(name)[0])
