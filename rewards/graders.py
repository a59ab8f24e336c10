"""Answer graders: the one place where a model's answer text is turned into a label.

Both the training rewards (``rewards/``) and the benchmark scorers (``eval_hooks/``) call these
functions, so a "yes" means the same thing during GRPO as it does on ORIC-Bench or POPE.

Every function here is total: whatever it is given (None, numbers, megabyte strings, unbalanced tags)
it returns a value and never raises.
"""

from __future__ import annotations

import re
from typing import Any, Literal

YesNo = Literal["yes", "no"]

# Scanning megabyte-long completions with regular expressions is cheap, but there is no reason to look
# beyond what a model could sensibly emit as an answer.
_MAX_SCAN_CHARS = 200_000

_SOLUTION_BLOCK = re.compile(r"<SOLUTION>(.*?)</SOLUTION>", re.DOTALL | re.IGNORECASE)
_SOLUTION_TAG = re.compile(r"</?SOLUTION>", re.IGNORECASE)
_REASONING_THEN_SOLUTION = re.compile(
    r"\A\s*<REASONING>(?P<reasoning>.*?)</REASONING>\s*<SOLUTION>(?P<solution>.*?)</SOLUTION>\s*\Z",
    re.DOTALL,
)
_ANY_TAG = re.compile(r"</?(?:REASONING|SOLUTION)>")
_STRICT_YES_NO = re.compile(r"\A\s*(yes|no)\s*\.?\s*\Z", re.IGNORECASE)
_WORDS = re.compile(r"[a-z']+")


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


def solution_blocks(text: str) -> list[str]:
    """Return the contents of every ``<SOLUTION>...</SOLUTION>`` block in ``text`` (tags any case)."""
    return _SOLUTION_BLOCK.findall(text[:_MAX_SCAN_CHARS])


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
    """True when the completion is exactly one non-empty ``<REASONING>`` block followed by exactly one
    ``<SOLUTION>`` block, with nothing but whitespace around them."""
    text = completion_text(completion)
    if text is None or len(text) > _MAX_SCAN_CHARS:
        return False
    match = _REASONING_THEN_SOLUTION.match(text)
    if match is None:
        return False
    reasoning, solution = match.group("reasoning"), match.group("solution")
    if not reasoning.strip():
        return False
    # A nested or repeated tag inside either block means the layout is not "exactly one of each".
    return not (_ANY_TAG.search(reasoning) or _ANY_TAG.search(solution))


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
    if text is None:
        return None
    text = text[:_MAX_SCAN_CHARS]
    blocks = solution_blocks(text)
    if len(blocks) == 1:
        return extract_yes_no(_SOLUTION_TAG.sub("", blocks[0]))
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


def pope_yes_no(text: Any) -> YesNo:
    """POPE's official parsing rule: keep the text before the first period, drop commas, split into
    words; the answer is "no" when a word is "No", "not" or "no", otherwise "yes".

    Unlike :func:`extract_yes_no` this never abstains: POPE counts every unparsable answer as "yes".
    """
    text = completion_text(text) or ""
    first_sentence = text[:_MAX_SCAN_CHARS].split(".")[0].replace(",", "")
    words = first_sentence.split(" ")  # split on spaces only, as the official script does
    return "no" if any(w in ("No", "not", "no") for w in words) else "yes"


# ---------------------------------------------------------------------------------------- options

OPTION_LETTERS = "ABCDEFGHIJ"
_LETTER_ALONE = re.compile(r"\A\s*\(?([A-J])\)?\s*(?:[.:)\]]|\Z|\s)")
_LETTER_PHRASE = re.compile(r"(?i:\b(?:answer|option|choice|is)\s*(?:is|:)?\s*(?:option\s*)?)[(\[]?([A-J])[)\].,:]?(?=\s|\Z|[.,;!])")
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
    >>> extract_option("No, but I can see a red cup.", {"A": "Yes, I can see a blue cup.", "B": "No, but I can see a red cup."})
    ('B', 'option_text')
    """
    text = completion_text(text)
    if not text:
        return None, "unresolved"
    text = _SOLUTION_TAG.sub(" ", text[:_MAX_SCAN_CHARS]).strip()
    valid = set(options) if options else set(OPTION_LETTERS)
    for pattern in (_LETTER_ALONE, _LETTER_PAREN, _LETTER_PHRASE):
        match = pattern.search(text)
        if match and match.group(1).upper() in valid:
            return match.group(1).upper(), "letter"
    if options:
        answer = f" {_normalise(text)} "
        hits = [letter for letter, option in options.items() if _normalise(str(option)) and f" {_normalise(str(option))} " in answer]
        if len(hits) > 1:  # "a cup" inside "a red cup": keep the longest, if it alone is the longest
            longest = max(len(_normalise(options[h])) for h in hits)
            hits = [h for h in hits if len(_normalise(options[h])) == longest]
        if len(hits) == 1:
            return hits[0], "option_text"
    return None, "unresolved"


# ----------------------------------------------------------------------------------------- counts

# ORBIT's official ``clean_answer_improved`` (its ``utils.py``) reads numerals and number words up to
# twenty and ninety-nine; the tables below hold the same values, searched in the same order.
ROMAN_NUMERALS = {numeral: value for value, numeral in enumerate(
    ("i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x", "xi", "xii", "xiii", "xiv", "xv", "xvi", "xvii", "xviii", "xix", "xx"),
    start=1)}  # fmt: skip
UNIT_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
TEEN_WORDS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
              "seventeen": 17, "eighteen": 18, "nineteen": 19}  # fmt: skip
TENS_WORDS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_COUNT_WITH_LIST = re.compile(r"(\d+)\s*\[(.*?)\]")
_INTEGER = re.compile(r"\d+")
# Longest numeral first ("viii" before "v" and "i"); numerals of one length in ascending value, as officially.
_ROMAN_SEARCH = [(re.compile(rf"\b{numeral}\b"), value) for numeral, value in sorted(ROMAN_NUMERALS.items(), key=lambda kv: len(kv[0]), reverse=True)]
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
    4. ``"word"``: else a number word, searched in the order ten..nineteen then zero..nine, whatever comes first in the text
       ("eleven" reads 11, never 0);
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
    text = text[:_MAX_SCAN_CHARS].strip()
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
