"""Answer graders shared by the training rewards and the benchmark scorers: the text of a completion, a
ground-truth yes/no label, the yes/no of an R1-style answer's ``<SOLUTION>`` block (the accuracy reward and
ORIC-Bench R1), the free-form yes/no reading (the plain accuracy reward, ORIC-Bench, AMBER and others), and the
option letter of a multiple-choice answer (the option rewards, MIOH, FINER and the TSV suites), so a "yes" or a
"B" means the same thing during GRPO as it does on ORIC-Bench, POPE or MIOH. Parsing that only benchmarks use lives
beside them in ``eval_hooks/`` (``eval_hooks/answers.py`` when several share it); the R1 format itself (its
instruction and the check of its shape) in :mod:`core.prompts`.

Every function here is total: whatever it is given (None, numbers, megabyte strings, unbalanced tags)
it returns a value and never raises.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Literal

from core.mcq_format import OPTION_LETTERS
from core.prompts import MAX_SCAN_CHARS, SOLUTION_TAG, has_r1_format, solution_blocks

YesNo = Literal["yes", "no"]

_STRICT_YES_NO = re.compile(r"\A\s*(yes|no)\s*\.?\s*\Z", re.IGNORECASE)
_WORDS = re.compile(r"[a-z']+")

__all__ = [
    "OPTION_LETTERS",
    "YesNo",
    "completion_text",
    "extract_option",
    "extract_yes_no",
    "grade_tagged_yes_no",
    "has_reasoning_solution_format",
    "normalize_yes_no_label",
    "solution_blocks",
    "strict_yes_no",
]


def completion_text(completion: Any) -> str | None:
    """Return the text of one completion, conversational or plain; None when it holds no text.

    TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``, where the
    content may itself be a string or a list of typed parts (``{"type": "text", "text": ...}``).

    >>> completion_text([{"role": "assistant", "content": "yes"}])
    'yes'
    >>> completion_text("no") is None
    False
    """
    try:
        if isinstance(completion, str):
            return completion
        if isinstance(completion, dict):
            return _content_text(completion.get("content"))
        if isinstance(completion, (list, tuple)):
            # The last assistant turn holds what the model generated.
            for message in reversed(completion):
                if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                    return _content_text(message.get("content"))
        return None
    except Exception:  # noqa: BLE001 - a grader never raises
        return None


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def normalize_yes_no_label(solution: Any) -> YesNo | None:
    """Read a ground-truth label: ``yes``, ``no`` or the ORIC release form ``<SOLUTION>yes</SOLUTION>``.

    >>> normalize_yes_no_label("<SOLUTION>Yes</SOLUTION>")
    'yes'
    >>> normalize_yes_no_label("maybe") is None
    True
    """
    if isinstance(solution, bool):
        return "yes" if solution else "no"
    if not isinstance(solution, str):
        return None
    blocks = solution_blocks(solution)
    if len(blocks) == 1:
        return strict_yes_no(blocks[0])
    if blocks:
        return None
    return strict_yes_no(solution)


def strict_yes_no(text: Any) -> YesNo | None:
    """Return ``yes``/``no`` when ``text`` is exactly that one word (case, whitespace and one trailing
    period tolerated); None for anything else, including "yes or no".

    >>> strict_yes_no(" Yes. ")
    'yes'
    >>> strict_yes_no("yes or no") is None
    True
    """
    if not isinstance(text, str) or len(text) > 64:
        return None
    match = _STRICT_YES_NO.match(text)
    return match.group(1).lower() if match else None  # type: ignore[return-value]


def grade_tagged_yes_no(completion: Any) -> YesNo | None:
    """The answer of an R1-style completion: the yes/no inside its single ``<SOLUTION>`` block.

    None when there is no block, more than one, an empty one, or anything but one yes/no word in it.
    """
    text = completion_text(completion)
    if text is None:
        return None
    blocks = solution_blocks(text)
    if len(blocks) != 1:
        return None
    return strict_yes_no(blocks[0])


def has_reasoning_solution_format(completion: Any) -> bool:
    """True when the completion has the R1 answer format (:func:`core.prompts.has_r1_format`):
    exactly one non-empty ``<REASONING>`` block followed by exactly one ``<SOLUTION>`` block."""
    return has_r1_format(completion_text(completion))


def extract_yes_no(text: Any) -> YesNo | None:
    """Free-form yes/no extraction for benchmark answers ("Yes, there is a cat." -> yes).

    Rules, in order: an R1-style ``<SOLUTION>`` block if present; "yes or no" is unresolved; the first
    word if it is yes/no; else the answer is yes/no when exactly one of the words "yes" and "no" occurs.
    None when unresolved.

    >>> extract_yes_no("No, there is not.")
    'no'
    >>> extract_yes_no("I cannot tell") is None
    True
    """
    text = completion_text(text)
    return None if text is None else _extract_yes_no_text(text)


@lru_cache(maxsize=65536)  # the bootstrap re-scores the same answers a thousand times
def _extract_yes_no_text(text: str) -> YesNo | None:
    text = text[:MAX_SCAN_CHARS]
    blocks = solution_blocks(text)
    if len(blocks) == 1:
        return extract_yes_no(SOLUTION_TAG.sub("", blocks[0]))
    words = _WORDS.findall(text.lower())
    if not words:
        return None
    if words[:3] in (["yes", "or", "no"], ["no", "or", "yes"]):
        return None  # restating the options is no answer
    if words[0] in ("yes", "no"):
        return words[0]  # type: ignore[return-value]
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


_LETTER_ALONE = re.compile(r"\A\s*\(?([A-J])\)?\s*(?:[.:)\]]|\Z|\s)")
_LETTER_PHRASE = re.compile(
    r"(?i:\b(?:answer|option|choice|is)\s*(?:is|:)?\s*(?:option\s*)?)[(\[]?([A-J])[)\].,:]?(?=\s|\Z|[.,;!])"
)
_LETTER_PAREN = re.compile(r"\(([A-Ja-j])\)")
_NORMALISE = re.compile(r"[^a-z0-9]+")


def _normalise(text: str) -> str:
    return _NORMALISE.sub(" ", text.lower()).strip()


def extract_option(text: Any, options: dict[str, str] | None = None) -> tuple[str | None, str]:
    """The option letter a multiple-choice answer picks, and the rule that resolved it.

    Rules, in order (the second value names the one that fired, for the resolution shares the scorers
    report): ``"letter"``: the answer starts with a capital letter standing alone ("B", "B.",
    "(c)" also in lower case, "B) No, but I can see ..."), or says "the answer is B" / "option B";
    ``"option_text"``: the answer contains exactly one option's text (compared without case and
    punctuation; the longest match wins when one option's text contains another's); otherwise
    ``(None, "unresolved")``. Only letters present in ``options`` count when options are given.

    >>> extract_option("The answer is B")
    ('B', 'letter')
    >>> extract_option("(c)")
    ('C', 'letter')
    >>> extract_option(
    ...     "No, but I can see a red cup.", {"A": "Yes, I can see a blue cup.", "B": "No, but I can see a red cup."}
    ... )
    ('B', 'option_text')
    """
    text = completion_text(text)
    if not text:
        return None, "unresolved"
    return _extract_option(text, tuple((str(k), str(v)) for k, v in options.items()) if options else None)


@lru_cache(maxsize=65536)  # the bootstrap re-scores the same answers a thousand times
def _extract_option(text: str, pairs: tuple[tuple[str, str], ...] | None) -> tuple[str | None, str]:
    options = dict(pairs) if pairs else None
    text = SOLUTION_TAG.sub(" ", text[:MAX_SCAN_CHARS]).strip()
    valid = set(options) if options else set(OPTION_LETTERS)
    for pattern in (_LETTER_ALONE, _LETTER_PAREN, _LETTER_PHRASE):
        match = pattern.search(text)
        if match and match.group(1).upper() in valid:
            return match.group(1).upper(), "letter"
    if options:
        answer = f" {_normalise(text)} "
        hits = [
            letter
            for letter, option in options.items()
            if _normalise(str(option)) and f" {_normalise(str(option))} " in answer
        ]
        if len(hits) > 1:  # "a cup" inside "a red cup": keep the longest, if it alone is the longest
            longest = max(len(_normalise(options[h])) for h in hits)
            hits = [h for h in hits if len(_normalise(options[h])) == longest]
        if len(hits) == 1:
            return hits[0], "option_text"
    return None, "unresolved"
