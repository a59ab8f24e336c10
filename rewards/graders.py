"""Answer graders: the one place where a model's answer text is turned into a label.

Both the training rewards (``rewards/``) and the benchmark scorers (``eval_hooks/``) call these
functions, so a "yes" means the same thing during GRPO as it does on ORIC-Bench or POPE.

Every function here is total: whatever it is given (None, numbers, megabyte strings, unbalanced tags)
it returns a value and never raises.
"""

from __future__ import annotations

import re
from functools import lru_cache
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
    return None if text is None else _extract_yes_no_text(text)


@lru_cache(maxsize=65536)  # the bootstrap re-scores the same answers a thousand times
def _extract_yes_no_text(text: str) -> YesNo | None:
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
    return _pope_yes_no_text(completion_text(text) or "")


@lru_cache(maxsize=65536)
def _pope_yes_no_text(text: str) -> YesNo:
    first_sentence = text[:_MAX_SCAN_CHARS].split(".")[0].replace(",", "")
    words = first_sentence.split(" ")  # split on spaces only, as the official script does
    return "no" if any(w in ("No", "not", "no") for w in words) else "yes"


# ---------------------------------------------------------------------------------------- options

OPTION_LETTERS = "ABCDEFGHIJ"
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
    text = _SOLUTION_TAG.sub(" ", text[:_MAX_SCAN_CHARS]).strip()
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


# ------------------------------------------------------------- hallucination suites (benchB, issue 18)
# Each function below reproduces one benchmark's official answer parsing; the scorers in
# eval_hooks/benchmarks/ call them and nothing else.


def substring_yes_no(text: Any, not_means_no: bool = False) -> YesNo | None:
    """The parse of RePOPE's and DASH-B's ``src/eval_utils.py``: "yes" when the lower-cased answer contains
    the substring "yes" (anywhere: "eyes" counts), else "no" when it contains "no" (also "not", "know",
    "snow"); RePOPE also maps "not" to no, which "no" already covers. None (counted in neither class)
    otherwise."""
    lowered = (completion_text(text) or "")[:_MAX_SCAN_CHARS].lower()
    if "yes" in lowered:
        return "yes"
    if "no" in lowered or (not_means_no and "not" in lowered):
        return "no"
    return None


_NATURALBENCH_WORDS = {"yes_no": ("yes", "no"), "multiple_choice": ("A", "B")}


def naturalbench_answer(text: Any, question_type: str) -> int:
    """NaturalBench's ``extract_answer`` (``naturalbench_vqa.py``): find the first whole-word, case-insensitive
    occurrence of "yes" and "no" ("A" and "B" for multiple choice, so the article "a" counts as A); 1 when
    only the first word occurs or it occurs first, 0 for the second, -1 when neither does."""
    first, second = _NATURALBENCH_WORDS.get(question_type, ("yes", "no"))
    text = (completion_text(text) or "")[:_MAX_SCAN_CHARS]
    positions = []
    for word in (first, second):
        match = re.search(r"\b" + re.escape(word) + r"\b", text, re.IGNORECASE)
        positions.append(match.start() if match else -1)
    if positions == [-1, -1]:
        return -1
    if -1 not in positions:
        return 1 if positions[0] < positions[1] else 0
    return 0 if positions[0] == -1 else 1


def single_character_option(text: Any) -> str | None:
    """CRPE's ``eval_crpe.py`` reading: the stripped answer is the option only when it is one character
    (compared case-sensitively with the correct letter); any longer answer is invalid (None, wrong)."""
    text = (completion_text(text) or "").strip()
    return text if len(text) == 1 else None


def mmhal_rating(review: Any) -> int:
    """MMHal-Bench's rating parse (``summarize_gpt_mmhal.py``): the digit s in 0..6 for which
    "rating: s" occurs in the lower-cased review; 0 when none or several do."""
    lowered = (completion_text(review) or "").lower()
    found = [score for score in range(7) if f"rating: {score}" in lowered]
    return found[0] if len(found) == 1 else 0


_STRICT_JUDGE_YES_NO = re.compile(r"^(yes|no)$", re.IGNORECASE)


def mmvp_judge_grade(reply: Any) -> YesNo | None:
    """MMVP's ``gpt_grader.py`` reading of the grader's reply: exactly "yes" or "no" (any case, nothing
    around it); anything else is undetermined (None: the answer is not credited)."""
    text = completion_text(reply) or ""
    return text.lower() if _STRICT_JUDGE_YES_NO.match(text) else None  # type: ignore[return-value]


_JSON_BOOL = re.compile(r'"?is_prediction_correct"?\s*[:=]\s*"?(true|false)"?', re.IGNORECASE)


def haloquest_verdict(reply: Any) -> bool | None:
    """HaloQuest's auto-eval field ``is_prediction_correct`` from the judge's structured reply (a JSON
    object, possibly in a code fence, or ``is_prediction_correct: true``); None when it is absent."""
    text = (completion_text(reply) or "")[:_MAX_SCAN_CHARS]
    matches = _JSON_BOOL.findall(text)
    if len({m.lower() for m in matches}) != 1:
        return None
    return matches[0].lower() == "true"


# ------------------------------------------------------------------------ VQA answers and numbers
# The answer normalisation of the official VQA / TextVQA evaluators (EvalAI's answer processor, as in
# haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``), reimplemented step for step, quirks included: see
# ``normalize_vqa_answer``. The tables below are protocol data (the evaluator's word lists), not code.

VQA_NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
VQA_ARTICLES = frozenset({"a", "an", "the"})
# Contractions written without their apostrophe, restored (the evaluator's table; "Im", "Ive" and "Id've"
# keep their capital I, so after lower-casing they never match, exactly as in the official code).
VQA_CONTRACTIONS = {
    "aint": "ain't",
    "arent": "aren't",
    "cant": "can't",
    "couldve": "could've",
    "couldnt": "couldn't",
    "couldn'tve": "couldn't've",
    "couldnt've": "couldn't've",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hadnt've": "hadn't've",
    "hadn'tve": "hadn't've",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hed": "he'd",
    "hed've": "he'd've",
    "he'dve": "he'd've",
    "hes": "he's",
    "howd": "how'd",
    "howll": "how'll",
    "hows": "how's",
    "Id've": "I'd've",
    "I'dve": "I'd've",
    "Im": "I'm",
    "Ive": "I've",
    "isnt": "isn't",
    "itd": "it'd",
    "itd've": "it'd've",
    "it'dve": "it'd've",
    "itll": "it'll",
    "let's": "let's",
    "maam": "ma'am",
    "mightnt": "mightn't",
    "mightnt've": "mightn't've",
    "mightn'tve": "mightn't've",
    "mightve": "might've",
    "mustnt": "mustn't",
    "mustve": "must've",
    "neednt": "needn't",
    "notve": "not've",
    "oclock": "o'clock",
    "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at",
    "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at",
    "shant": "shan't",
    "shed've": "she'd've",
    "she'dve": "she'd've",
    "she's": "she's",
    "shouldve": "should've",
    "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've",
    "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll",
    "somebodys": "somebody's",
    "someoned": "someone'd",
    "someoned've": "someone'd've",
    "someone'dve": "someone'd've",
    "someonell": "someone'll",
    "someones": "someone's",
    "somethingd": "something'd",
    "somethingd've": "something'd've",
    "something'dve": "something'd've",
    "somethingll": "something'll",
    "thats": "that's",
    "thered": "there'd",
    "thered've": "there'd've",
    "there'dve": "there'd've",
    "therere": "there're",
    "theres": "there's",
    "theyd": "they'd",
    "theyd've": "they'd've",
    "they'dve": "they'd've",
    "theyll": "they'll",
    "theyre": "they're",
    "theyve": "they've",
    "twas": "'twas",
    "wasnt": "wasn't",
    "wed've": "we'd've",
    "we'dve": "we'd've",
    "weve": "we've",
    "werent": "weren't",
    "whatll": "what'll",
    "whatre": "what're",
    "whats": "what's",
    "whatve": "what've",
    "whens": "when's",
    "whered": "where'd",
    "wheres": "where's",
    "whereve": "where've",
    "whod": "who'd",
    "whod've": "who'd've",
    "who'dve": "who'd've",
    "wholl": "who'll",
    "whos": "who's",
    "whove": "who've",
    "whyll": "why'll",
    "whyre": "why're",
    "whys": "why's",
    "wont": "won't",
    "wouldve": "would've",
    "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've",
    "yall": "y'all",
    "yall'll": "y'all'll",
    "y'allll": "y'all'll",
    "yall'd've": "y'all'd've",
    "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've",
    "youd": "you'd",
    "youd've": "you'd've",
    "you'dve": "you'd've",
    "youll": "you'll",
    "youre": "you're",
    "youve": "you've",
}
VQA_PUNCTUATION = (
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
)
_DIGIT_COMMA_DIGIT = re.compile(r"(?<=\d)(,)+(?=\d)")
# The official pattern is written ``(?!<=\d)(\.)(?!\d)``: a misspelt look-behind, so in effect a period is
# removed unless a digit follows it ("2.5" keeps its point, "1." loses it). Kept as written.
_VQA_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
# The official call passes re.UNICODE (32) where ``sub`` expects a count: at most 32 periods are removed.
_VQA_PERIOD_LIMIT = int(re.UNICODE)


# VLMEvalKit's ``process_punctuation`` (vlmeval/smp/misc.py) uses its own two patterns; its period rule has
# a working look-behind ("1." keeps its period there).
_VLMEVAL_DIGIT_COMMA_DIGIT = re.compile(r"(\d)(,)(\d)")
_VLMEVAL_PERIOD = re.compile(r"(?<!\d)\.(?!\d)")


def _vqa_punctuation(
    text: str, comma_between_digits: re.Pattern[str] = _DIGIT_COMMA_DIGIT, period: re.Pattern[str] = _VQA_PERIOD
) -> str:
    """Punctuation step shared by both evaluators: a mark next to a space, or any mark at all once a
    digit-comma-digit occurs, is deleted; otherwise it becomes a space. Then periods go (see above)."""
    out = text
    delete_all = comma_between_digits.search(text) is not None
    for mark in VQA_PUNCTUATION:
        out = out.replace(mark, "" if delete_all or f"{mark} " in text or f" {mark}" in text else " ")
    return period.sub("", out, count=_VQA_PERIOD_LIMIT)


def _vqa_digits_and_articles(text: str) -> str:
    words = [VQA_NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(VQA_CONTRACTIONS.get(word, word) for word in words if word not in VQA_ARTICLES)


def normalize_vqa_answer(text: Any) -> str:
    """An answer as the VQA / TextVQA evaluators compare it (EvalAI's answer processor, followed in
    haotian-liu/LLaVA ``llava/eval/m4c_evaluator.py``; VLMEvalKit's ``process_answer`` is the same
    minus the first step): lower-case, drop commas and question marks, split off "'s"; newlines and
    tabs become spaces; punctuation (see ``_vqa_punctuation``); number words zero..ten become digits
    ("none" is 0), articles go, apostrophe-less contractions are restored.

    >>> normalize_vqa_answer("Two")
    '2'
    >>> normalize_vqa_answer("The Coca-Cola")
    'coca cola'
    >>> normalize_vqa_answer("1,000")
    '1000'
    """
    text = completion_text(text)
    if not text:
        return ""
    text = text[:_MAX_SCAN_CHARS].lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _vqa_digits_and_articles(_vqa_punctuation(text))


def vlmeval_yes_no(text: Any) -> YesNo | None:
    """VLMEvalKit's Y/N answer extraction (``vlmeval/dataset/utils/yorn.py`` ``YOrN_Extraction``):
    lower-case, VQA punctuation handling (``vlmeval/smp/misc.py`` ``process_punctuation``), split on
    whitespace; "yes" when the word yes occurs and no does not, "no" the other way round, else None
    (VLMEvalKit's "Unknown", never correct).

    >>> vlmeval_yes_no("Yes, it is.")
    'yes'
    >>> vlmeval_yes_no("Yes and no.") is None
    True
    """
    text = completion_text(text)
    if text is None:
        return None
    lowered = text[:_MAX_SCAN_CHARS].lower()
    words = _vqa_punctuation(lowered, _VLMEVAL_DIGIT_COMMA_DIGIT, _VLMEVAL_PERIOD).split()
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


def mme_yes_no(text: Any) -> YesNo | None:
    """The official MME parser (``eval_tool/calculation.py`` ``parse_pred_ans``, BradyFU/Awesome-
    Multimodal-Large-Language-Models, branch Evaluation): lower-case; exactly "yes"/"no" is the answer;
    otherwise "yes" when the first four characters contain "yes", else "no" when they contain "no";
    else None (the script's "other", never correct).

    >>> mme_yes_no("No, there is no dog.")
    'no'
    >>> mme_yes_no("There is a dog.") is None
    True
    """
    text = completion_text(text)
    if text is None:
        return None
    answer = text[:_MAX_SCAN_CHARS].lower()
    if answer in ("yes", "no"):
        return answer  # type: ignore[return-value]
    head = answer[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return None


def _relaxed_float(text: str) -> float | None:
    try:
        return float(text[:-1].rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_match(prediction: Any, target: Any, max_relative_change: float = 0.05) -> bool:
    """ChartQA's relaxed correctness (google-research/pix2struct ``pix2struct/metrics.py``
    ``relaxed_correctness``, also VLMEvalKit's): when both texts are numbers (a trailing "%" divides by
    100) and the target is not zero, right when ``|prediction - target| / |target| <= 5%``; otherwise a
    case-insensitive exact match of the whole texts. The caller strips the prediction (VLMEvalKit does,
    the target it leaves as it is).

    >>> relaxed_match("10.4", "10")
    True
    >>> relaxed_match("10.6", "10")
    False
    >>> relaxed_match("Yes", "yes")
    True
    """
    prediction = completion_text(prediction) if not isinstance(prediction, (int, float)) else str(prediction)
    target = str(target) if target is not None else ""
    if prediction is None:
        return False
    predicted, expected = _relaxed_float(prediction[:_MAX_SCAN_CHARS]), _relaxed_float(target)
    if predicted is not None and expected:
        return abs(predicted - expected) / abs(expected) <= max_relative_change
    return prediction.lower() == target.lower()
