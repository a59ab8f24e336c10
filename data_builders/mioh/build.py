"""MIOH-format multi-image questions from COCO-format instances ("Fine-Grained Multi-Image Object Hallucination
Benchmark", MIOH: Sec. 3.1-3.3, App. A.3 "Question Generation" and A.4 "Adversarial Example Construction").

Every question is computed from the annotations, so each has one verifiable answer:

- **existence** and **counting**: the classes of each image and their instance counts (``instances.json``);
  counting asks only about a class in images holding at most ``max_count`` of it (MIOH App. A.1.1: five).
- **attribute**: the attribute-object pairs of each image's FINER-layout scene graph; an attribute phrase
  ``with a light yellow color`` reads ``light yellow`` (``with a``/``with an`` and a trailing ``color``,
  ``shape``, ``pattern``, ``texture``, ``material``, ``border`` or ``size`` dropped); a phrase of another form is
  not asked. An image without a scene graph is never in an attribute question.
- **position**: relations between two boxes of different classes in one image: ``S to the left of A`` when a box
  of S ends (x + width) at or before a box of A begins (x), ``S to the right of A`` the reverse, ``S above A``
  when a box of S ends (y + height) at or before a box of A begins (image y grows downwards), ``S below A`` the
  reverse. A relation holds in an image when some pair of boxes satisfies it, and is absent when none does.

Pressures (MIOH Sec. 3.3, App. A.4): ``easy`` draws images and distractors at random; ``hard_negative`` draws
the images lacking the asked fact and the absent distractors among the quarter most plausible by co-occurrence
P(A|B) (ORIC's :class:`~data_builders.oric.judges.CooccurrenceJudge`) or, with a CLIP model, alternately by
CLIPScore of the absent fact (ORIC's :class:`~data_builders.oric.clip_negatives.ClipScorer`); ``hard_positive``
draws the images holding the asked fact among the quarter where it is smallest (box area over image area) or,
with CLIP, alternately lowest-scored; ``num_images`` asks easy questions of the larger set sizes. Each cell
(template, pressure, set size) spreads its answers over the layout's letters in a seeded shuffled cycle.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl
from core.progress import progress_bar
from data_builders.finer.scene_graph import SceneGraph
from data_builders.mioh.templates import (
    CHOICES,
    LETTERS,
    TEMPLATES,
    Template,
    answerable_letters,
    lettered,
    option_texts,
)
from data_builders.oric.annotations import ImageRecord, describe
from data_builders.oric.build import BuildStats, oric_file_images, readable_images
from data_builders.oric.judges import CooccurrenceJudge

PRESSURES = ("easy", "hard_negative", "hard_positive", "num_images")
RELATIONS = ("to the left of", "to the right of", "above", "below")
MAX_COUNT = 5  # MIOH App. A.1.1: counting questions only on images with 5 or fewer instances
HARD_SHARE = 4  # a hard pressure draws among the top 1/4 of candidates
ATTEMPTS = 60  # constructions tried per question before it counts as a shortfall
BALANCE_TOLERANCE = 0.05
_ATTRIBUTE_NOUNS = ("color", "colour", "shape", "pattern", "texture", "material", "border", "size")
_ATTRIBUTE = re.compile(r"^with (?:a|an) (.+?) (?:" + "|".join(_ATTRIBUTE_NOUNS) + r")$")

Fact = Any  # a class name, an (attribute, object) pair or a (subject, relation, anchor) triple


def attribute_word(phrase: str) -> str | None:
    """The adjective of a FINER attribute phrase, or None when the phrase has another form.

    >>> attribute_word("with a light yellow color"), attribute_word("red"), attribute_word("with a dark shell")
    ('light yellow', 'red', None)
    """
    phrase = phrase.strip()
    match = _ATTRIBUTE.match(phrase)
    if match:
        return match.group(1)
    return None if phrase.startswith("with ") or not phrase else phrase


def box_relations(boxes: dict[str, list[list[float]]]) -> set[tuple[str, str, str]]:
    """The (subject, relation, anchor) triples that hold between boxes of two different classes (module
    docstring: one box strictly beside, above or below the other)."""
    found: set[tuple[str, str, str]] = set()
    for subject, subject_boxes in boxes.items():
        for anchor, anchor_boxes in boxes.items():
            if subject == anchor:
                continue
            for sx, sy, sw, sh in subject_boxes:
                for ax, ay, aw, ah in anchor_boxes:
                    if sx + sw <= ax:
                        found.add((subject, "to the left of", anchor))
                    if ax + aw <= sx:
                        found.add((subject, "to the right of", anchor))
                    if sy + sh <= ay:
                        found.add((subject, "above", anchor))
                    if ay + ah <= sy:
                        found.add((subject, "below", anchor))
    return found


@dataclass
class ImageFacts:
    """What one image holds: class counts, area fractions, attribute pairs (None: no scene graph), relations."""

    record: ImageRecord
    counts: dict[str, int]
    area: dict[str, float]
    attributes: set[tuple[str, str]] | None
    relations: set[tuple[str, str, str]]

    def facts(self, task: str) -> set[Fact]:
        if task == "attribute":
            return self.attributes or set()
        if task == "position":
            return self.relations
        return set(self.counts)


def image_facts(record: ImageRecord, graph: SceneGraph | None) -> ImageFacts:
    """The facts of one image (module docstring)."""
    size = float(record.width * record.height) or 1.0
    attributes = None
    if graph is not None:
        attributes = {
            (word, obj.name)
            for obj in graph.objects
            for word in map(attribute_word, obj.attributes)
            if word is not None
        }
    return ImageFacts(
        record,
        {name: len(boxes) for name, boxes in record.boxes.items()},
        {name: value / size for name, value in describe(record).items()},
        attributes,
        box_relations(record.boxes),
    )


def fact_text(task: str, fact: Fact) -> str:
    """A fact as an option reads: ``dog``, ``light yellow bowl``, ``cup to the left of bowl``."""
    if task == "attribute":
        return f"{fact[0]} {fact[1]}"
    if task == "position":
        return " ".join(fact)
    return str(fact)


def question_text(template: Template, fact: Fact, count: int | None = None, extreme: str | None = None) -> str:
    """The template with its placeholders filled (``most/least`` becomes ``extreme``)."""
    text = template.text
    if extreme is not None:
        text = text.replace("most/least", extreme)
    if template.task == "attribute" and "{" in text:
        return text.format(attribute=fact[0], object=fact[1])
    if template.task == "position" and "{" in text:
        return text.format(subject=fact[0], relation=fact[1], anchor=fact[2])
    return text.format(object=fact, count=count) if "{" in text else text


@dataclass
class MiohSettings:
    """What to build."""

    questions: int = 4  # per template, pressure and set size
    num_images: tuple[int, ...] = (2, 4)
    tasks: tuple[str, ...] = ("existence", "counting", "attribute", "position")
    max_count: int = MAX_COUNT
    seed: int = 42
    pressures: tuple[str, ...] = PRESSURES  # a subset builds only those cells (e.g. easy ones for a warm-start)


@dataclass
class MiohStats:
    """Counts of what was skipped and why, and the cells that fell short."""

    skipped: Counter[str] = field(default_factory=Counter)
    shortfall: dict[str, int] = field(default_factory=dict)
    missing_images: list[str] = field(default_factory=list)
    unreadable_images: list[str] = field(default_factory=list)


class Scorer:
    """Hardness of a fact in an image: plausibility when absent (hard negative) and size or CLIPScore when
    present (hard positive); CLIP scores come from an ORIC :class:`ClipScorer` when one is given."""

    def __init__(self, facts: list[ImageFacts], clip: Any = None, embeddings: Any = None) -> None:
        self.facts = facts
        self.judge = CooccurrenceJudge([f.record for f in facts])
        self.clip, self.embeddings = clip, embeddings
        self._clip_cache: dict[tuple[int, str], float] = {}

    def cooccurrence(self, index: int, task: str, fact: Fact) -> float:
        image = self.facts[index]
        context = list(image.counts)
        if task == "attribute":
            return (fact[1] in image.counts) + self.judge.probability(context, fact[1], image.record.image_id)
        if task == "position":
            parts = (fact[0], fact[2])
            present = sum(part in image.counts for part in parts)
            return present + sum(self.judge.probability(context, p, image.record.image_id) for p in parts) / 2
        return self.judge.probability(context, fact, image.record.image_id)

    def clip_score(self, index: int, task: str, fact: Fact) -> float:
        key = (index, fact_text(task, fact))
        if key not in self._clip_cache:
            self._clip_cache[key] = float(self.clip.clip_scores(self.embeddings[index], [key[1]])[0])
        return self._clip_cache[key]

    def size(self, index: int, task: str, fact: Fact) -> float:
        area = self.facts[index].area
        if task == "attribute":
            return area.get(fact[1], 1.0)
        if task == "position":
            return min(area.get(fact[0], 1.0), area.get(fact[2], 1.0))
        return area.get(fact, 1.0)


@dataclass
class Draw:
    """One question's draw: the pressure, and which hardness measure it uses (``by``)."""

    pressure: str
    by: str | None
    rng: random.Random
    scorer: Scorer
    task: str

    def negative(self, index: int, fact: Fact) -> float:
        if self.by == "clip":
            return self.scorer.clip_score(index, self.task, fact)
        return self.scorer.cooccurrence(index, self.task, fact)

    def positive(self, index: int, fact: Fact) -> float:
        if self.by == "clip":
            return self.scorer.clip_score(index, self.task, fact)
        return self.scorer.size(index, self.task, fact)

    def images(self, candidates: list[int], k: int, fact: Fact, holding: bool) -> list[int] | None:
        """``k`` distinct images of ``candidates`` (holding ``fact`` or not), hard ones under a hard pressure."""
        if len(candidates) < k:
            return None
        if k == 0:
            return []
        if self.pressure == "hard_positive" and holding:
            candidates = _hardest(candidates, k, lambda i: self.positive(i, fact), reverse=False)
        elif self.pressure == "hard_negative" and not holding:
            candidates = _hardest(candidates, k, lambda i: self.negative(i, fact), reverse=True)
        return self.rng.sample(candidates, k)

    def distractors(self, candidates: Iterable[Fact], k: int, images: list[int]) -> list[Fact] | None:
        """``k`` distractor facts, the most plausible in ``images`` under the hard-negative pressure."""
        pool = sorted(set(candidates), key=repr)
        if len(pool) < k:
            return None
        if self.pressure == "hard_negative":
            pool = _hardest(pool, k, lambda f: sum(self.negative(i, f) for i in images) / len(images), reverse=True)
        return self.rng.sample(pool, k)


def _hardest(candidates: list[Any], k: int, score: Callable[[Any], float], reverse: bool) -> list[Any]:
    ranked = sorted(candidates, key=lambda c: (score(c), repr(c)), reverse=reverse)
    return ranked[: max(k, math.ceil(len(ranked) / HARD_SHARE))]


class Pool:
    """The images a task may ask about, indexed by fact."""

    def __init__(self, facts: list[ImageFacts], task: str, universe: set[Fact], max_count: int) -> None:
        self.task, self.max_count = task, max_count
        self.images = [i for i, f in enumerate(facts) if task != "attribute" or f.attributes is not None]
        self.facts = facts
        self.universe = universe
        self.holding: dict[Fact, list[int]] = {}
        for index in self.images:
            for fact in facts[index].facts(task):
                if task != "counting" or facts[index].counts[fact] <= max_count:
                    self.holding.setdefault(fact, []).append(index)
        self.known = sorted(self.holding, key=repr)

    def has(self, index: int, fact: Fact) -> bool:
        return fact in self.facts[index].facts(self.task)

    def count(self, index: int, fact: Fact) -> int:
        return self.facts[index].counts.get(fact, 0)

    def lacking(self, fact: Fact) -> list[int]:
        return [i for i in self.images if not self.has(i, fact)]

    def countable(self, index: int, fact: Fact) -> bool:
        return self.count(index, fact) <= self.max_count


def build_universe(task: str, facts: list[ImageFacts], class_names: list[str], graphs: list[SceneGraph]) -> set[Fact]:
    """Every fact a distractor may name: the classes; the attribute pairs of the scene graphs and their negatives;
    the relations seen and each with the opposite relation."""
    if task in ("existence", "counting"):
        return set(class_names)
    if task == "attribute":
        pairs = set()
        for graph in graphs:
            for obj in graph.objects:
                for phrase in [*obj.attributes, *(n for negatives in obj.attribute_negatives for n in negatives)]:
                    word = attribute_word(phrase)
                    if word is not None:
                        pairs.add((word, obj.name))
        return pairs
    opposite = {"to the left of": "to the right of", "to the right of": "to the left of", "above": "below"}
    opposite["below"] = "above"
    seen = set().union(*(f.relations for f in facts)) if facts else set()
    return seen | {(s, opposite[r], a) for s, r, a in seen} | {(a, r, s) for s, r, a in seen}


# ---- one question per rule: (images, fact shown in the question, option texts, answer letter, extra) or None


Built = tuple[list[int], str, list[str], str, dict[str, Any]]


def _order(draw: Draw, holding: list[int], lacking: list[int], position: int | None) -> list[int]:
    """The set in question order: ``holding`` (one image) at ``position`` when given, else all shuffled."""
    if position is None:
        images = holding + lacking
        draw.rng.shuffle(images)
        return images
    draw.rng.shuffle(lacking)
    return lacking[:position] + holding + lacking[position:]


def _choices(draw: Draw, correct: str | None, distractors: list[str], letter: int) -> list[str]:
    """Four candidates with ``correct`` at ``letter`` (none when the answer is "None of the above")."""
    draw.rng.shuffle(distractors)
    if correct is None:
        return distractors[:CHOICES]
    return distractors[:letter] + [correct] + distractors[letter : CHOICES - 1]


def build_question(template: Template, pool: Pool, draw: Draw, size: int, letter: int) -> Built | None:
    """One attempt at a question of ``template`` with ``size`` images whose answer is the ``letter``-th option."""
    rng, task = draw.rng, template.task
    if not pool.known:
        return None
    fact = rng.choice(pool.known)
    holding_all = pool.holding[fact]
    lacking_all = pool.lacking(fact)
    text = fact_text(task, fact)
    rule = template.rule
    if rule in ("any", "all"):
        held = {0: size, 1: rng.randint(1, size - 1), 2: 0}[letter]
        have = draw.images(holding_all, held, fact, True)
        lack = draw.images(lacking_all, size - held, fact, False)
        if have is None or lack is None:
            return None
        return (
            _order(draw, have, lack, None),
            question_text(template, fact),
            option_texts("yes_some_none", size),
            (LETTERS[letter]),
            {},
        )
    if rule in ("select", "two_images"):
        none = letter == size
        have = [] if none else draw.images(holding_all, 1, fact, True)
        lack = draw.images(lacking_all, size - (0 if none else 1), fact, False)
        if have is None or lack is None:
            return None
        images = _order(draw, have, lack, None if none else letter)
        return images, question_text(template, fact), option_texts("images", size), LETTERS[letter], {}
    if rule in ("which_any", "which_all"):
        if rule == "which_all":
            held = size
        else:
            held = rng.randint(1, size) if task == "existence" else 1
        have = draw.images(holding_all, held, fact, True)
        lack = draw.images(lacking_all, size - held, fact, False)
        if have is None or lack is None:
            return None
        images = have + lack
        union = set().union(*(pool.facts[i].facts(task) for i in images))
        if rule == "which_any":
            candidates = pool.universe - union
        else:
            common = set.intersection(*(set(pool.facts[i].facts(task)) for i in images))
            candidates = (union - common) | (pool.universe - union)
        distractors = draw.distractors(candidates, CHOICES, images)
        if distractors is None:
            return None
        rng.shuffle(images)
        correct = None if letter == CHOICES else text
        choices = _choices(draw, correct, [fact_text(task, d) for d in distractors], letter)
        return images, template.text, option_texts("choices", size, choices), LETTERS[letter], {}
    if rule == "first_not_second":
        first = draw.images(holding_all, 1, fact, True)
        second = draw.images(lacking_all, 1, fact, False)
        if first is None or second is None:
            return None
        rest = [i for i in pool.images if i not in first + second]
        if len(rest) < size - 2:
            return None
        images = first + second + rng.sample(rest, size - 2)
        one, two = pool.facts[images[0]].facts(task), pool.facts[images[1]].facts(task)
        candidates = {d for d in pool.universe | set(two) if not (d in one and d not in two)}
        distractors = draw.distractors(candidates, CHOICES, images[:1])
        if distractors is None:
            return None
        correct = None if letter == CHOICES else text
        choices = _choices(draw, correct, [fact_text(task, d) for d in distractors], letter)
        return images, template.text, option_texts("choices", size, choices), LETTERS[letter], {}
    return _counting_question(template, pool, draw, size, letter, fact, holding_all, lacking_all)


def _counting_question(
    template: Template,
    pool: Pool,
    draw: Draw,
    size: int,
    letter: int,
    fact: Fact,
    holding_all: list[int],
    lacking_all: list[int],
) -> Built | None:
    rng, rule = draw.rng, template.rule
    if rule in ("total", "image_count"):
        held = rng.randint(1, size)
        have = draw.images(holding_all, held, fact, True)
        lack = draw.images(lacking_all, size - held, fact, False)
        if have is None or lack is None:
            return None
        value = sum(pool.count(i, fact) for i in have) if rule == "total" else held
        low = max(1, value - 4) if rule == "total" else 0
        numbers = [n for n in range(low, value + 5) if n != value]
        correct = None if letter == CHOICES else str(value)
        distractors = [str(n) for n in rng.sample(numbers, CHOICES)]
        choices = _choices(draw, correct, distractors, letter)
        images = _order(draw, have, lack, None)
        return images, question_text(template, fact), option_texts("choices", size, choices), LETTERS[letter], {}
    if rule == "appears_count":
        held = rng.randint(1, size)
        have = draw.images(holding_all, held, fact, True)
        lack = draw.images(lacking_all, size - held, fact, False)
        if have is None or lack is None:
            return None
        images = have + lack
        totals = Counter()
        for index in images:
            totals.update(pool.facts[index].counts)
        value = totals[fact]
        reliable = {name for name in pool.universe if all(pool.countable(i, name) for i in images)}
        distractors = draw.distractors({name for name in reliable if totals[name] != value}, CHOICES, images)
        if distractors is None:
            return None
        rng.shuffle(images)
        correct = None if letter == CHOICES else str(fact)
        choices = _choices(draw, correct, [str(d) for d in distractors], letter)
        return (
            images,
            question_text(template, fact, count=value),
            option_texts("choices", size, choices),
            (LETTERS[letter]),
            {},
        )
    if rule == "select_count":
        target = draw.images(holding_all, 1, fact, True)
        if target is None:
            return None
        value = pool.count(target[0], fact)
        others = [i for i in pool.images if i != target[0] and pool.count(i, fact) != value and pool.countable(i, fact)]
        none = letter == size
        rest = draw.images(others, size - (0 if none else 1), fact, False)
        if rest is None:
            return None
        images = rest if none else _order(draw, target, rest, letter)
        return images, question_text(template, fact, count=value), option_texts("images", size), LETTERS[letter], {}
    # most_least: one image holds strictly the most (or the fewest) instances, ``letter`` is its position
    extreme = "most" if rng.random() < 0.5 else "least"
    candidates = holding_all if extreme == "most" else [i for i in pool.images if pool.countable(i, fact)]
    target = draw.images(candidates, 1, fact, True)
    if target is None:
        return None
    value = pool.count(target[0], fact)
    others = [
        i
        for i in pool.images
        if i != target[0]
        and pool.countable(i, fact)
        and (pool.count(i, fact) < value if extreme == "most" else pool.count(i, fact) > value)
    ]
    rest = draw.images(others, size - 1, fact, False)
    if rest is None:
        return None
    images = _order(draw, target, rest, letter)
    return (
        images,
        question_text(template, fact, extreme=extreme),
        option_texts("images_only", size),
        (LETTERS[letter]),
        {"extreme": extreme},
    )


# ---- the build


def pressure_sizes(template: Template, settings: MiohSettings) -> list[tuple[str, int]]:
    """The (pressure, set size) cells of a template: easy and the hard pressures at the smallest size, the
    ``num_images`` pressure at each larger one; the two-image comparisons always have two images."""
    if template.rule == "two_images":
        return [(p, 2) for p in PRESSURES[:3]]
    smallest = min(settings.num_images)
    cells = [(p, smallest) for p in PRESSURES[:3]]
    return cells + [("num_images", n) for n in sorted(set(settings.num_images)) if n != smallest]


def build_questions(
    facts: list[ImageFacts],
    class_names: list[str],
    graphs: list[SceneGraph],
    settings: MiohSettings,
    stats: MiohStats,
    *,
    clip: Any = None,
    embeddings: Any = None,
) -> list[dict[str, Any]]:
    """The MIOH records of a build (module docstring), in template order."""
    rng = random.Random(settings.seed)
    scorer = Scorer(facts, clip, embeddings)
    pools = {
        task: Pool(facts, task, build_universe(task, facts, class_names, graphs), settings.max_count)
        for task in settings.tasks
    }
    templates = [t for t in TEMPLATES if t.task in settings.tasks]
    records: list[dict[str, Any]] = []
    seen: set[tuple[tuple[str, ...], str, tuple[str, ...]]] = set()
    cells = [(t, p, n) for t in templates for p, n in pressure_sizes(t, settings) if p in settings.pressures]
    offsets: Counter[str] = Counter()
    for template, pressure, size in progress_bar(cells, desc="MIOH cells", unit="cell"):
        letters = answerable_letters(template.layout, size)
        group = balance_key(template, size)
        start = offsets[group]  # the cycle continues across the cells of a layout, so every letter comes up
        cycle = [letters[(start + q) % len(letters)] for q in range(settings.questions)]
        offsets[group] += settings.questions
        rng.shuffle(cycle)
        made = 0
        for number, letter in enumerate(cycle):
            by = None
            if pressure == "hard_negative":
                by = "clip" if clip is not None and number % 2 else "cooccurrence"
            elif pressure == "hard_positive":
                by = "clip" if clip is not None and number % 2 else "size"
            draw = Draw("easy" if pressure == "num_images" else pressure, by, rng, scorer, template.task)
            built = None
            for _ in range(ATTEMPTS):
                built = build_question(template, pools[template.task], draw, size, LETTERS.index(letter))
                if built is None:
                    continue
                images, question, options, answer, _extra = built
                key = (tuple(facts[i].record.file_name for i in images), question, tuple(options))
                if key in seen:
                    built = None
                    continue
                seen.add(key)
                break
            if built is None:
                continue
            images, question, options, answer, extra = built
            records.append(
                {
                    "id": f"mioh-t{template.number:02d}-{pressure}-n{size}-{number:04d}",
                    "images": [facts[i].record.file_name for i in images],
                    "question": question,
                    "options": lettered(options),
                    "answer": answer,
                    "task": template.task,
                    "pattern": template.pattern,
                    "pressure": pressure,
                    "num_images": size,
                    "template": template.number,
                    "hard_by": by,
                    **extra,
                }
            )
            made += 1
        if made < settings.questions:
            stats.shortfall[f"t{template.number:02d}/{pressure}/n{size}"] = settings.questions - made
    return records


def balance_key(template: Template, size: int) -> str:
    """The group a question's answer letter is balanced in: its layout, and for image options its set size."""
    return template.layout if template.layout in ("yes_some_none", "choices") else f"{template.layout}/n{size}"


def fewest_largest(total: int, chance: float) -> float:
    """The smallest possible largest share of one letter among ``total`` answers over ``1 / chance`` letters."""
    return math.ceil(total * chance - 1e-9) / total


def answer_balance(records: list[dict[str, Any]], tolerance: float = BALANCE_TOLERANCE) -> dict[str, Any]:
    """Per option layout (and set size), the largest share of one answer letter against chance (one over the
    letters that can be the answer); ``balanced`` when no share exceeds chance + ``tolerance`` (or, for a group
    too small for that, the smallest largest share its count allows)."""
    groups: dict[str, Counter[str]] = {}
    chance: dict[str, float] = {}
    by_number = {t.number: t for t in TEMPLATES}
    for record in records:
        template = by_number[record["template"]]
        key = balance_key(template, len(record["images"]))
        groups.setdefault(key, Counter())[record["answer"]] += 1
        chance[key] = 1 / len(answerable_letters(template.layout, len(record["images"])))
    report: dict[str, Any] = {"tolerance": tolerance, "layouts": {}}
    for key, counts in sorted(groups.items()):
        total = sum(counts.values())
        share = max(counts.values()) / total
        report["layouts"][key] = {
            "questions": total,
            "answers": dict(sorted(counts.items())),
            "largest_share": round(share, 4),
            "chance": round(chance[key], 4),
            "balanced": share <= max(chance[key] + tolerance, fewest_largest(total, chance[key])),
        }
    report["balanced"] = all(group["balanced"] for group in report["layouts"].values())
    return report


def build_images(path: Path) -> set[str]:
    """The image files another build asks about: a MIOH file (or a MIOH build folder's ``mioh.json``) or an
    ORIC file; the leakage check of ``--exclude-images-from``."""
    path = Path(path)
    if path.is_dir():
        path = path / "mioh.json"
    records = read_json_or_jsonl(path, what="--exclude-images-from file")
    if records and all(isinstance(r, dict) and isinstance(r.get("images"), list) for r in records):
        return {str(image) for record in records for image in record["images"]}
    return oric_file_images(path)


MANIFEST_PACKAGES = ("torch", "transformers", "pycocotools", "numpy", "pillow")
OUTPUT_FILE = "mioh.json"


def usable_images(
    images: list[ImageRecord], image_root: Path, clip: Any, stats: MiohStats
) -> tuple[list[ImageRecord], Any]:
    """The images whose file exists (and, with CLIP, decodes), with their CLIP embeddings (or None)."""
    if clip is not None:
        oric_stats = BuildStats()
        present, embeddings = readable_images(images, image_root, clip, oric_stats)
        stats.skipped.update(oric_stats.skipped)
        stats.missing_images += oric_stats.missing_images
        stats.unreadable_images += oric_stats.unreadable_images
        return present, embeddings
    present = [record for record in images if (image_root / record.file_name).is_file()]
    stats.missing_images += [record.file_name for record in images if not (image_root / record.file_name).is_file()]
    if stats.missing_images:
        stats.skipped["missing_image_file"] += len(stats.missing_images)
    return present, None


def build_mioh(
    instances: tuple[list[ImageRecord], list[str]],
    graphs: list[SceneGraph],
    image_root: Path,
    settings: MiohSettings,
    *,
    clip: Any = None,
    exclude_images: set[str] | None = None,
) -> tuple[list[dict[str, Any]], MiohStats, list[ImageRecord]]:
    """The records of one build and its stats; raises :class:`UserError` when nothing usable was built."""
    images, class_names = instances
    stats = MiohStats()
    if exclude_images:
        kept = [record for record in images if record.file_name not in exclude_images]
        stats.skipped["excluded_image"] = len(images) - len(kept)
        images = kept
    present, embeddings = usable_images(images, image_root, clip, stats)
    if len(present) < max(settings.num_images):
        raise UserError(
            f"{image_root}: {len(present)} usable images, fewer than the largest --num-images "
            f"({max(settings.num_images)}); skipped: {dict(stats.skipped)}"
        )
    by_image = {graph.image: graph for graph in graphs}
    names = {record.file_name for record in present}
    stats.skipped["scene_graph_without_image"] = sum(1 for image in by_image if image not in names)
    facts = [image_facts(record, by_image.get(record.file_name)) for record in present]
    records = build_questions(facts, class_names, graphs, settings, stats, clip=clip, embeddings=embeddings)
    if not records:
        raise UserError(
            f"nothing usable was built: no question could be drawn from {len(present)} images "
            f"(short: {stats.shortfall}); nothing was written"
        )
    return records, stats, present
