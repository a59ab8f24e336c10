"""Reading and checking the LLM's answers for FINER-Tuning (FINER, arXiv 2603.17662, Sec. 3, Figs. 16-23).

Every answer is checked in code before it is used: the one-line ``PHRASE=...`` (or ``SENTENCE=...``,
``Q=... || A=...``) format, the same number of units in Ψ− as in Ψ+, exactly one unit changed (the one we
asked for), the head object kept. A failed check raises :class:`Rejected` with a short reason, which the
builder feeds back to the LLM when it asks again.

Units: OBJ phrases are lists (``a dog, a cat and two birds``); ATTR phrases are one noun phrase whose units
are the adjective group before the noun and each clause after it (``with ...``, ``wearing ...``, split at
commas and ``and``); REL phrases are ``The <head> is <clause 1>, is <clause 2> and is <clause 3>``, whose
units are the clauses (each starting with is/are/has/have/was/were).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from data_builders.finer.templates import DETERMINERS, lower_first_word, normalize_phrase

MAX_UNITS = 5
NOTHING = ("NONE", "SKIP")  # an extraction with nothing to extract: valid, not retried

_POST_NOMINAL = (
    "with|wearing|featuring|bearing|labeled|labelled|showing|displaying|having|holding|carrying|covered|made|"
    "printed|written|that|which|whose|in"
)
_POST_NOMINAL_START = re.compile(rf"^(?:{_POST_NOMINAL})\b|^\w+(?:ing|ed)\b", re.IGNORECASE)
_ATTRIBUTE_SPLIT = re.compile(rf",\s*(?:and\s+)?|\s+and\s+(?=(?:{_POST_NOMINAL})\b)", re.IGNORECASE)
_FIRST_MARKER = re.compile(rf"\s(?=(?:{_POST_NOMINAL})\b)", re.IGNORECASE)
_AUXILIARY = r"(?:is|are|has|have|was|were)\b"
_RELATION = re.compile(rf"^(?P<head>.+?)\s+(?:that\s+|which\s+)?(?P<rest>{_AUXILIARY}.*)$", re.IGNORECASE)
_CLAUSE_SPLIT = re.compile(rf"\s*,\s*(?:and\s+)?(?={_AUXILIARY})|\s+and\s+(?={_AUXILIARY})", re.IGNORECASE)
_OBJECT_SPLIT = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+", re.IGNORECASE)
_QA = re.compile(r"^Q\s*=\s*(?P<q>.+?)\s*\|\|\s*A\s*=\s*(?P<a>.+)$", re.IGNORECASE)
_WORDS = re.compile(r"[\w'-]+")


class Rejected(ValueError):
    """An LLM answer that breaks the protocol; the message says why in a few words."""


# ---- line formats


def one_line(answer: str) -> str:
    line = (answer or "").strip()
    if not line:
        raise Rejected("empty answer")
    if "\n" in line:
        raise Rejected("answer is not exactly one line")
    return line


def tagged(answer: str, tag: str) -> str | None:
    """The value of a one-line ``TAG=value`` answer; None for ``TAG=NONE``/``TAG=SKIP`` (nothing to extract)."""
    line = one_line(answer)
    match = re.match(rf"^{tag}\s*=\s*(.*)$", line, re.IGNORECASE)
    if not match:
        raise Rejected(f"expected one line '{tag}=...'")
    value = normalize_phrase(match.group(1))
    if value.upper() in NOTHING:
        return None
    if not value:
        raise Rejected(f"empty {tag}")
    return value


def question_answer(answer: str) -> tuple[str, str] | None:
    """``Q=<question> || A=<answer>`` as a pair; None for ``SKIP``."""
    line = one_line(answer)
    if normalize_phrase(line).upper() in NOTHING:
        return None
    match = _QA.match(line)
    if not match:
        raise Rejected("expected one line 'Q=... || A=...'")
    question, reply = re.sub(r"\s+", " ", match["q"]).strip(), re.sub(r"\s+", " ", match["a"]).strip()
    if not question.endswith("?"):
        raise Rejected("the question does not end with '?'")
    if not normalize_phrase(reply):
        raise Rejected("empty answer after 'A='")
    return question, reply


# ---- words


def words(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


# Irregular plurals of nouns that scene captions name often; the regular ones are handled by rule.
_IRREGULAR_PLURALS = {
    "men": "man",
    "women": "woman",
    "children": "child",
    "people": "person",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "oxen": "ox",
    "dice": "die",
    "sheep": "sheep",
    "fish": "fish",
}


def word_forms(word: str) -> set[str]:
    """The word and the singulars it may be the plural (or possessive) of.

    >>> [one in word_forms(word) for word, one in [("boxes", "box"), ("berries", "berry"), ("knives", "knife")]]
    [True, True, True]
    >>> "woman" in word_forms("women"), "dog" in word_forms("dog's")
    (True, True)
    >>> "car" in word_forms("carpet")
    False
    """
    word = word.lower()
    forms = {word}
    if word.endswith("'s"):
        word = word[:-2]
        forms.add(word)
    if word in _IRREGULAR_PLURALS:
        forms.add(_IRREGULAR_PLURALS[word])
    if word.endswith("ies") and len(word) > 4:
        forms.add(word[:-3] + "y")
    if word.endswith("ves") and len(word) > 4:
        forms.update((word[:-3] + "f", word[:-3] + "fe"))
    if word.endswith("es") and len(word) > 3:
        forms.add(word[:-2])
    if word.endswith("s") and not word.endswith("ss") and len(word) > 2:
        forms.add(word[:-1])
    return forms


def mentioned(item: str, text: str) -> bool:
    """Whether the head noun of ``item`` (its last word) occurs in ``text`` as a whole word, singular or plural:
    ``a car`` is not in "a carpet", ``a cat`` is not in "a dog catching a ball", ``two cats`` is in "a cat"."""
    item_words = words(item)
    if not item_words:
        return False
    head = word_forms(item_words[-1])
    return any(head & word_forms(word) for word in words(text))


def changed_units(before: list[str], after: list[str]) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(before, after)) if a.strip().lower() != b.strip().lower()]


def _one_changed(before: list[str], after: list[str], index: int, what: str) -> None:
    if len(after) != len(before):
        raise Rejected(f"has {len(after)} {what}s, expected {len(before)}")
    changed = changed_units(before, after)
    if not changed:
        raise Rejected(f"no {what} was changed")
    if len(changed) > 1:
        raise Rejected(f"changed {len(changed)} {what}s, expected exactly one")
    if changed[0] != index:
        raise Rejected(f"changed {what} {changed[0] + 1}, expected {what} {index + 1}")
    new = after[index].strip().lower()
    if any(new == unit.strip().lower() for i, unit in enumerate(before) if i != index):
        raise Rejected(f"the new {what} duplicates another {what}")


# ---- OBJ (Figs. 16, 20)


def object_units(phrase: str) -> list[str]:
    """``a dog, a cat and two birds`` -> ``['a dog', 'a cat', 'two birds']``."""
    return [unit.strip() for unit in _OBJECT_SPLIT.split(phrase) if unit.strip()]


def check_objects(phrase: str, caption: str) -> list[str]:
    units = object_units(phrase)
    if not 1 <= len(units) <= MAX_UNITS:
        raise Rejected(f"lists {len(units)} objects, expected 1 to {MAX_UNITS}")
    if len({u.lower() for u in units}) != len(units):
        raise Rejected("lists the same object twice")
    for unit in units:
        if not mentioned(unit, caption):
            raise Rejected(f"object {unit!r} is not in the caption")
    return units


def check_object_negative(positive: list[str], phrase: str, k: int, caption: str) -> list[str]:
    """Ψ−OBJ: same number of objects, only the k-th (1-based) replaced, by an object not in the caption."""
    units = object_units(phrase)
    _one_changed(positive, units, k - 1, "object")
    if mentioned(units[k - 1], caption):
        raise Rejected(f"the new object {units[k - 1]!r} appears in the caption")
    return units


# ---- ATTR (Figs. 17, 21)


@dataclass(frozen=True)
class AttributePhrase:
    """``a fluffy white dog with a red collar and with floppy ears``: determiner ``a``, adjective group
    ``fluffy white``, head ``dog``, clauses ``with a red collar`` and ``with floppy ears``."""

    determiner: str
    adjectives: str
    head: str
    clauses: tuple[str, ...]
    text: str  # the phrase as written

    @property
    def units(self) -> list[str]:
        return ([self.adjectives] if self.adjectives else []) + list(self.clauses)


def parse_attribute_phrase(phrase: str) -> AttributePhrase:
    segments: list[str] = []
    for segment in (s.strip() for s in _ATTRIBUTE_SPLIT.split(phrase)):
        if not segment:
            continue
        if segments and not _POST_NOMINAL_START.match(segment):
            segments[-1] += ", " + segment  # not a new attribute clause: part of the previous one
        else:
            segments.append(segment)
    if not segments:
        raise Rejected("empty attribute phrase")
    first = segments[0]
    marker = _FIRST_MARKER.search(first)
    noun, clauses = (
        (first[: marker.start()], [first[marker.end() :], *segments[1:]]) if marker else (first, segments[1:])
    )
    noun_words = noun.split()
    determiner = noun_words[0] if noun_words and noun_words[0].lower() in DETERMINERS else ""
    noun_words = noun_words[1:] if determiner else noun_words
    if not noun_words:
        raise Rejected("cannot find the object noun of the attribute phrase")
    return AttributePhrase(
        determiner, " ".join(noun_words[:-1]), noun_words[-1], tuple(c.strip() for c in clauses), phrase
    )


def check_attributes(phrase: str, caption: str) -> AttributePhrase:
    parsed = parse_attribute_phrase(phrase)
    if not 1 <= len(parsed.units) <= MAX_UNITS:
        raise Rejected(f"has {len(parsed.units)} attributes, expected 1 to {MAX_UNITS}")
    if not mentioned(parsed.head, caption):
        raise Rejected(f"object {parsed.head!r} is not in the caption")
    return parsed


def check_attribute_negative(positive: AttributePhrase, phrase: str, k: int) -> AttributePhrase:
    """Ψ−ATTR: same object head and determiner, same number of attribute units, only unit k (1-based) changed."""
    parsed = parse_attribute_phrase(phrase)
    if parsed.head.lower() != positive.head.lower() or parsed.determiner.lower() != positive.determiner.lower():
        raise Rejected(f"the object changed from {positive.head!r} to {parsed.head!r}")
    _one_changed(positive.units, parsed.units, k - 1, "attribute")
    return parsed


# ---- REL (Figs. 18, 22)


@dataclass(frozen=True)
class RelationPhrase:
    """``The dog is next to the bench and is under the tree``: head ``The dog``, two clauses."""

    head: str
    clauses: tuple[str, ...]
    rest: str  # the clauses as written

    def noun_phrase(self) -> str:
        """The form used inside a question: ``the dog that is next to the bench and is under the tree``."""
        return f"{lower_first_word(self.head)} that {self.rest}"


def parse_relation_phrase(phrase: str) -> RelationPhrase:
    match = _RELATION.match(phrase.strip())
    if not match or not [w for w in match["head"].split() if w.lower() not in DETERMINERS]:
        raise Rejected("expected 'The <object> is <relation 1>, is <relation 2> ... and is <relation N>'")
    rest = match["rest"].strip()
    clauses = tuple(c.strip() for c in _CLAUSE_SPLIT.split(rest) if c.strip())
    return RelationPhrase(match["head"].strip(), clauses, rest)


def check_relations(phrase: str, caption: str) -> RelationPhrase:
    parsed = parse_relation_phrase(phrase)
    if not 1 <= len(parsed.clauses) <= MAX_UNITS:
        raise Rejected(f"has {len(parsed.clauses)} relations, expected 1 to {MAX_UNITS}")
    if not mentioned(parsed.head, caption):
        raise Rejected(f"object {parsed.head!r} is not in the caption")
    return parsed


def check_relation_negative(positive: RelationPhrase, phrase: str, k: int) -> RelationPhrase:
    """Ψ−REL: the head exactly as before, same number of clauses, only clause k (1-based) changed, and not
    by merely inserting 'not'."""
    parsed = parse_relation_phrase(phrase)
    if words(parsed.head) != words(positive.head):
        raise Rejected(f"the head changed from {positive.head!r} to {parsed.head!r}")
    _one_changed(list(positive.clauses), list(parsed.clauses), k - 1, "relation")
    before, after = words(positive.clauses[k - 1]), words(parsed.clauses[k - 1])
    if [w for w in after if w != "not"] == before:
        raise Rejected("the relation was negated by inserting 'not' instead of being replaced")
    return parsed


# ---- WH (Figs. 19, 23)


def check_wh_answer(pair: tuple[str, str], sentence: str) -> tuple[str, str]:
    """(q+, a++): the answer is an exact span of the sentence and does not appear in the question."""
    question, answer = pair
    span = " ".join(words(answer))
    if not span or f" {span} " not in f" {' '.join(words(sentence))} ":
        raise Rejected("the answer is not an exact span of the sentence")
    if f" {span} " in f" {' '.join(words(question))} ":
        raise Rejected("the question repeats the answer")
    return question, answer


def word_diff(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    """The removed and the inserted words between two word lists (one contiguous edit)."""
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1
    return before[start : len(before) - end], after[start : len(after) - end]


def check_wh_negative(pair: tuple[str, str], question_pos: str) -> tuple[str, str]:
    """(q−, a+−): one attribute of the question replaced (WH word kept), and the answer names both the new
    attribute (denied) and the original one (restored)."""
    question, answer = pair
    before, after = words(question_pos), words(question)
    if before == after:
        raise Rejected("the negative question equals the positive question")
    if before[:1] != after[:1]:
        raise Rejected("the question word changed")
    removed, inserted = word_diff(before, after)
    if not removed or not inserted:
        raise Rejected("an attribute was added or removed instead of replaced")
    answer_text = f" {' '.join(words(answer))} "
    if f" {' '.join(inserted)} " not in answer_text or f" {' '.join(removed)} " not in answer_text:
        raise Rejected("the answer must deny the new attribute and restore the original one verbatim")
    return question, answer
