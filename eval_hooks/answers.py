"""Answer parsing shared by several benchmarks and the LLM judge: the option letter of a multiple-choice
answer (the one option grader, :func:`rewards.graders.extract_option`, which the training rewards share), the
count of a counting answer (ORBIT's official rules), and the substring yes/no of RePOPE's and DASH-B's official
code. Parsing used by one benchmark only lives in that benchmark's module; parsing shared with the training
rewards (yes/no, the R1 ``<SOLUTION>`` block, option letters) in :mod:`rewards.graders`.

Every function here is total: whatever it is given (None, numbers, megabyte strings, unbalanced tags)
it returns a value and never raises.
"""

from __future__ import annotations

import re
from typing import Any

from core.prompts import MAX_SCAN_CHARS
from rewards.graders import OPTION_LETTERS, YesNo, completion_text, extract_option

__all__ = ["OPTION_LETTERS", "extract_count", "extract_option", "substring_yes_no"]


# ----------------------------------------------------------------------------------------- counts

# ORBIT's official ``clean_answer_improved`` (its ``utils.py``) reads numerals and number words up to
# twenty and ninety-nine; the tables below hold the same values, searched in the same order.
ROMAN_NUMERALS = {
    numeral: value
    for value, numeral in enumerate(
        (
            "i",
            "ii",
            "iii",
            "iv",
            "v",
            "vi",
            "vii",
            "viii",
            "ix",
            "x",
            "xi",
            "xii",
            "xiii",
            "xiv",
            "xv",
            "xvi",
            "xvii",
            "xviii",
            "xix",
            "xx",
        ),
        start=1,
    )
}
UNIT_WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
TEEN_WORDS = {
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
TENS_WORDS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_COUNT_WITH_LIST = re.compile(r"(\d+)\s*\[(.*?)\]")
_INTEGER = re.compile(r"\d+")
# Longest numeral first ("viii" before "v" and "i"); numerals of one length in ascending value, as officially.
_ROMAN_SEARCH = [
    (re.compile(rf"\b{numeral}\b"), value)
    for numeral, value in sorted(ROMAN_NUMERALS.items(), key=lambda kv: len(kv[0]), reverse=True)
]
_WORD_SEARCH = [(re.compile(rf"\b{word}\b"), value) for word, value in {**TEEN_WORDS, **UNIT_WORDS}.items()]
_TENS_WORD = re.compile(rf"\b({'|'.join(TENS_WORDS)})(?:[\s-]+({'|'.join(UNIT_WORDS)}))?\b")
_LETTERS = re.compile(r"[a-z]+")


def extract_count(text: Any) -> tuple[int | None, str]:
    """The count a counting answer gives, and the rule that resolved it: ORBIT's official
    ``clean_answer_improved`` (``utils.py`` of the ORBIT repository), rule for rule and in its order.

    1. ``"count_list"``: the first ``<digits> [...]`` (closing bracket on the same line), the layout ORBIT asks for;
    2. ``"digits"``: else the first run of digits anywhere ("2.5" reads 2);
    3. ``"roman"``: else a Roman numeral i..xx standing as a word, in any case, longest numeral first
       (the official quirk: a standalone "I", as in "I think", reads as 1);
    4. ``"word"``: else a number word, searched in the order ten..nineteen then zero..nine, whatever comes first
       in the text ("eleven" reads 11, never 0);
    5. ``"tens_word"``: else twenty..ninety, optionally with a unit ("twenty-one" reads 21);
    6. otherwise ``(None, "unresolved")``: the official code then falls back to 0, and so do the scorers.

    Counts above ten are returned as they are: whether they are valid is the benchmark's decision.

    >>> extract_count("3 [cup, cup, plate]")
    (3, 'count_list')
    >>> extract_count("iii")
    (3, 'roman')
    >>> extract_count("There are eleven birds.")
    (11, 'word')
    """
    text = completion_text(text)
    if text is None:
        return None, "unresolved"
    text = text[:MAX_SCAN_CHARS].strip()
    if not text:
        return None, "unresolved"
    match = _COUNT_WITH_LIST.search(text)
    if match:
        return int(match.group(1)), "count_list"
    match = _INTEGER.search(text)
    if match:
        return int(match.group(0)), "digits"
    lower = text.lower()
    for pattern, value in _ROMAN_SEARCH:
        if pattern.search(lower):
            return value, "roman"
    for pattern, value in _WORD_SEARCH:
        if pattern.search(lower):
            return value, "word"
    match = _TENS_WORD.search(lower)
    if match:
        return TENS_WORDS[match.group(1)] + (UNIT_WORDS[match.group(2)] if match.group(2) else 0), "tens_word"
    for token in _LETTERS.findall(lower):  # the official last pass over the letter runs
        for table in (UNIT_WORDS, TEEN_WORDS, TENS_WORDS):
            if token in table:
                return table[token], "word"
    return None, "unresolved"


# ---- RePOPE's and DASH-B's yes/no


def substring_yes_no(text: Any, not_means_no: bool = False) -> YesNo | None:
    """The parse of RePOPE's and DASH-B's ``src/eval_utils.py``: "yes" when the lower-cased answer contains
    the substring "yes" (anywhere: "eyes" counts), else "no" when it contains "no" (also "not", "know",
    "snow"); RePOPE also maps "not" to no, which "no" already covers. None (counted in neither class)
    otherwise."""
    lowered = (completion_text(text) or "")[:MAX_SCAN_CHARS].lower()
    if "yes" in lowered:
        return "yes"
    if "no" in lowered or (not_means_no and "not" in lowered):
        return "no"
    return None
