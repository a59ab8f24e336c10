"""The five question/answer templates of FINER App. G and the composition of preference tuples.

A preference tuple pairs a fine-grained positive phrase Ψ+ (what the image shows) with a negative Ψ−
that differs in exactly one unit (FINER Sec. 3). For OBJ, ATTR and REL both configurations are built,
each with a template drawn at random (App. G):

- positive question: X = Ψ+, chosen "Yes, ... Ψ+", rejected "No, but ... Ψ−";
- negative question: X = Ψ−, chosen "No, but ... Ψ+", rejected "Yes, ... Ψ−".

App. G's prose lists the negative configuration's "Yes" answer with Ψ+; Sec. 3, Fig. 3 and Fig. 10 (and
the public FINER code) put Ψ− in it, which is the only reading where the rejected answer is wrong. We
follow the latter. WH tuples come ready-made (from an LLM or a scene graph) and are symmetrised.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

# (question with X, "yes" answer with Y, "no" answer with Z): FINER App. G, templates (1)-(5).
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("Does this image contain {x}?", "Yes, this image contains {y}.", "No, but this image contains {z}."),
    ("Does this image show {x}?", "Yes, this image shows {y}.", "No, but this image shows {z}."),
    ("Does this image include {x}?", "Yes, this image includes {y}.", "No, but this image includes {z}."),
    ("Can you see {x} in this image?", "Yes, I can see {y} in this image.", "No, but I can see {z} in this image."),
    ("Can {x} be seen in this image?", "Yes, {y} can be seen in this image.", "No, but {z} can be seen in this image."),
)
WH_TEMPLATE_ID = 0  # WH tuples are not templated

SUBSETS = ("obj", "attr", "rel", "wh")
DETERMINERS = frozenset(
    "a an the this that these those some one two three four five six seven eight nine ten several many each every "
    "its his her their our my your".split()
)
_NOT_PLURAL_ENDINGS = ("ss", "us", "is", "ics")


@dataclass(frozen=True)
class PreferenceTuple:
    """One preference tuple before it is written: the question, the chosen and the rejected answer."""

    subset: str  # obj | attr | rel | wh
    polarity: str  # pos (question about Ψ+) | neg (question about Ψ−)
    question: str
    chosen: str
    rejected: str
    template_id: int  # 1..5 (App. G), 0 for WH


def compose(subset: str, positive: str, negative: str, rng: random.Random) -> list[PreferenceTuple]:
    """Both configurations for one (Ψ+, Ψ−) pair, each with its own randomly drawn template.

    >>> pos, neg = compose("obj", "a dog", "a cat", random.Random(0))
    >>> pos.question
    'Can you see a dog in this image?'
    >>> (pos.chosen, pos.rejected)
    ('Yes, I can see a dog in this image.', 'No, but I can see a cat in this image.')
    """
    positive, negative = lower_first_word(positive), lower_first_word(negative)
    tuples = []
    for polarity in ("pos", "neg"):
        index = rng.randrange(len(TEMPLATES))
        question, yes, no = TEMPLATES[index]
        if polarity == "pos":
            item = (question.format(x=positive), yes.format(y=positive), no.format(z=negative))
        else:
            item = (question.format(x=negative), no.format(z=positive), yes.format(y=negative))
        tuples.append(PreferenceTuple(subset, polarity, *item, index + 1))
    return tuples


def compose_wh(question_pos: str, answer_pos: str, question_neg: str, answer_neg: str) -> list[PreferenceTuple]:
    """WH tuples from (q+, a++) and (q−, a+−), symmetrised: a−+ := a+− and a−− := a++ (FINER App. G)."""
    return [
        PreferenceTuple("wh", "pos", question_pos, answer_pos, answer_neg, WH_TEMPLATE_ID),
        PreferenceTuple("wh", "neg", question_neg, answer_neg, answer_pos, WH_TEMPLATE_ID),
    ]


# ---- phrase helpers shared by the scene-graph path, the LLM path and the MCQ builder


def is_plural(name: str) -> bool:
    """A rough English plural test for object names (``dogs`` yes, ``glass``/``bus`` no)."""
    word = name.strip().split()[-1].lower() if name.strip() else ""
    return len(word) > 2 and word.endswith("s") and not word.endswith(_NOT_PLURAL_ENDINGS)


def with_article(name: str) -> str:
    """``a dog``, ``an apple``, ``dogs`` (plurals and names that start with a determiner stay as they are)."""
    name = name.strip()
    first = name.split()[0].lower() if name else ""
    if first in DETERMINERS or is_plural(name):
        return name
    return f"an {name}" if first[:1] in "aeiou" else f"a {name}"


def join_and(items: list[str]) -> str:
    """``a dog, a cat and two birds``: the object-list format of FINER's extraction prompt (Fig. 16)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def join_oxford(items: list[str]) -> str:
    """``x``, ``x and y``, ``x, y, and z``: the list format of the FINER benchmark questions (Fig. 2)."""
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def lower_first_word(phrase: str) -> str:
    """Lower-case a leading determiner (``The dog`` -> ``the dog``) so the phrase fits inside a sentence;
    other first words (names, acronyms) keep their case."""
    head, _, rest = phrase.partition(" ")
    if head.lower() in DETERMINERS and head[1:] == head[1:].lower():
        return head.lower() + (" " + rest if rest else "")
    return phrase


def capitalize_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def normalize_phrase(text: str) -> str:
    """Collapse whitespace, drop surrounding quotes and trailing ``.;:`` (FINER's prompts ask for no trailing
    period; a model that adds one is not wrong)."""
    text = re.sub(r"\s+", " ", text).strip().strip("\"'“”‘’`").strip()
    return re.sub(r"[.;:\s]+$", "", text)
