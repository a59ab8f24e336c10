"""Scene graphs in the layout of the FINER benchmark files, and the offline FINER-Tuning path: preference
tuples from scene graphs, no LLM needed.

One record per image (a JSON list, or JSON lines), as in FINER App. B (Figs. 2 and 8), plus the image
path; every object, attribute and relation carries its own negatives (four in the FINER files)::

    {"example_id": "test_00001", "image": "000001.jpg",
     "objects": [{"object": "turtle", "object_index": 0, "neg_object": ["frog", "fish", "duck", "beaver"],
                  "attribute": ["with a dark green shell"], "neg_attribute": [["with a light blue shell", ...]],
                  "parsed_relation": [{"object_a": 0, "rel": "is sitting on the", "object_b": 1}],
                  "neg_relation": [["is hanging from the", ...]]},
                 {"object": "trunk", "object_index": 1, ...}]}

``docs/DATA_FORMATS.md`` documents every key. For each image :func:`tuples_for_image` yields up to eight
tuples: OBJ, ATTR, REL and WH, each in the positive and the negative configuration (FINER Sec. 3).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl
from data_builders.finer.templates import (
    PreferenceTuple,
    capitalize_first,
    compose,
    compose_wh,
    is_plural,
    join_and,
    join_oxford,
    with_article,
)

MAX_UNITS = 5  # FINER-Tuning lists 1-5 objects, attributes or relations per phrase (Figs. 16-18)
_AUXILIARIES = ("is ", "are ")
_TRAILING_ARTICLES = (" the", " a", " an")


@dataclass
class Relation:
    """``subject`` ``rel`` ``object`` (object indices), with negatives for ``rel``."""

    subject: int
    rel: str
    object: int
    negatives: list[str] = field(default_factory=list)


@dataclass
class SceneObject:
    """One object: its name, negatives, attributes (``with ...`` phrases) with their negatives, and the
    relations in which it is the subject."""

    index: int
    name: str
    negatives: list[str] = field(default_factory=list)
    attributes: list[str] = field(default_factory=list)
    attribute_negatives: list[list[str]] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


@dataclass
class SceneGraph:
    """A validated scene graph of one image."""

    image: str
    example_id: str
    objects: list[SceneObject]

    def object(self, index: int) -> SceneObject:
        return next(o for o in self.objects if o.index == index)

    @property
    def names(self) -> set[str]:
        return {o.name.lower() for o in self.objects}

    @property
    def relations(self) -> list[Relation]:
        return [r for o in self.objects for r in o.relations]

    def to_json(self) -> dict[str, Any]:
        """Back to the FINER file layout (used to write filtered scene graphs)."""
        return {
            "example_id": self.example_id,
            "image": self.image,
            "objects": [
                {
                    "object": o.name,
                    "object_index": o.index,
                    "neg_object": o.negatives,
                    "attribute": o.attributes,
                    "neg_attribute": o.attribute_negatives,
                    "parsed_relation": [
                        {"object_a": r.subject, "rel": r.rel, "object_b": r.object} for r in o.relations
                    ],
                    "neg_relation": [r.negatives for r in o.relations],
                }
                for o in self.objects
            ],
        }


# ---- reading and checking


def _strings(value: Any, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: {key} must be a list of strings")
    return [v.strip() for v in value if v.strip()]


def _negative_lists(value: Any, count: int, where: str, key: str, of: str) -> list[list[str]]:
    if value is None:
        value = [[] for _ in range(count)]
    if not isinstance(value, list) or len(value) != count:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise UserError(f"{where}: {key} must hold one list of negatives per {of} ({count}), got {got}")
    return [_strings(v, where, f"{key}[{i}]") for i, v in enumerate(value)]


def parse_scene_graph(record: Any, where: str) -> SceneGraph:
    """Check one record of a scene-graph file; every problem is a :class:`UserError` naming the record,
    the object and the key."""
    if not isinstance(record, dict) or not isinstance(record.get("objects"), list):
        raise UserError(f"{where}: expected an object with 'image' and an 'objects' list")
    image = record.get("image")
    if not isinstance(image, str) or not image.strip():
        raise UserError(f"{where}: 'image' (the image path relative to the image root) is missing")
    example_id = str(record.get("example_id", image))
    where = f"{where} ({example_id})"
    objects: list[SceneObject] = []
    for position, raw in enumerate(record["objects"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("object"), str) or not raw["object"].strip():
            raise UserError(f"{where}: objects[{position}] needs a non-empty 'object' name")
        index = raw.get("object_index", position)
        if not isinstance(index, int) or isinstance(index, bool):
            raise UserError(f"{where}: objects[{position}] ({raw['object']!r}): object_index must be an integer")
        at = f"{where}: object {raw['object']!r} (object_index {index})"
        attributes = _strings(raw.get("attribute"), at, "attribute")
        relations_raw = raw.get("parsed_relation") or []
        if not isinstance(relations_raw, list):
            raise UserError(f"{at}: parsed_relation must be a list of {{object_a, rel, object_b}}")
        rel_negatives = _negative_lists(raw.get("neg_relation"), len(relations_raw), at, "neg_relation", "relation")
        relations = []
        for number, rel in enumerate(relations_raw):
            if not isinstance(rel, dict) or not isinstance(rel.get("rel"), str) or not rel["rel"].strip():
                raise UserError(f"{at}: parsed_relation[{number}] needs object_a, rel and object_b")
            relations.append(
                Relation(rel.get("object_a", index), rel["rel"].strip(), rel.get("object_b"), rel_negatives[number])
            )
        objects.append(
            SceneObject(
                index=index,
                name=raw["object"].strip(),
                negatives=_strings(raw.get("neg_object"), at, "neg_object"),
                attributes=attributes,
                attribute_negatives=_negative_lists(
                    raw.get("neg_attribute"), len(attributes), at, "neg_attribute", "attribute"
                ),
                relations=relations,
            )
        )
    indices = Counter(o.index for o in objects)
    duplicated = sorted(i for i, n in indices.items() if n > 1)
    if duplicated:
        raise UserError(f"{where}: object_index {duplicated[0]} is used by more than one object")
    for obj in objects:
        for number, rel in enumerate(obj.relations):
            missing = [
                f"{end} {value!r}"
                for end, value in (("object_a", rel.subject), ("object_b", rel.object))
                if value not in indices
            ]
            if missing:
                raise UserError(
                    f"{where}: object {obj.name!r} (object_index {obj.index}): relation {number} {rel.rel!r} points to "
                    f"missing object {' and '.join(missing)}"
                )
    _rehome_relations(objects)
    return SceneGraph(image.strip(), example_id, objects)


def _rehome_relations(objects: list[SceneObject]) -> None:
    """Move every relation to the object it names as ``object_a``, with its negatives.

    Builders read a relation as "<owner> <rel> <object_b>"; one listed under another object (the cup's "is on
    the table" under the cat) would otherwise make true-looking phrases about the wrong subject ("the cat that
    is on the table"). Within each object, relations keep their file order.
    """
    by_index = {obj.index: obj for obj in objects}
    for obj in objects:
        stray = [rel for rel in obj.relations if rel.subject != obj.index]
        if stray:
            obj.relations = [rel for rel in obj.relations if rel.subject == obj.index]
            for rel in stray:
                by_index[rel.subject].relations.append(rel)


def load_scene_graphs(path: Path) -> list[SceneGraph]:
    """Read and check a scene-graph file (a JSON list or JSON lines)."""
    records = read_json_or_jsonl(path, what="scene-graph file")
    return [parse_scene_graph(record, f"{path}: record {number}") for number, record in enumerate(records, start=1)]


# ---- phrases built from scene graphs


def relation_text(rel: str, other: str) -> str:
    """``is standing on the`` + ``floor`` -> ``is standing on the floor``."""
    return f"{rel} {other}"


def usable_negatives(negatives: list[str], forbidden: set[str]) -> list[str]:
    """Negatives that are not also present (by name) among ``forbidden``, without duplicates."""
    seen, out = set(), []
    for negative in negatives:
        key = negative.lower()
        if key not in forbidden and key not in seen:
            seen.add(key)
            out.append(negative)
    return out


def editable_attributes(obj: SceneObject, minimum: int = 1) -> list[int]:
    """Indices of attributes that have at least ``minimum`` usable negatives."""
    forbidden = {a.lower() for a in obj.attributes}
    return [i for i, negs in enumerate(obj.attribute_negatives) if len(usable_negatives(negs, forbidden)) >= minimum]


def editable_relations(obj: SceneObject, minimum: int = 1) -> list[int]:
    """Indices of relations (with ``obj`` as subject) that have at least ``minimum`` usable negatives."""
    forbidden = {r.rel.lower() for r in obj.relations}
    return [i for i, r in enumerate(obj.relations) if len(usable_negatives(r.negatives, forbidden)) >= minimum]


def sample_in_order(rng: random.Random, items: list[int], k: int, must_include: int) -> list[int]:
    """``k`` of ``items`` in their original order, always including ``must_include``."""
    others = [i for i in items if i != must_include]
    return sorted([must_include, *rng.sample(others, k - 1)])


def wh_question(mode: str, rel: str, context_phrase: str) -> str | None:
    """The WH question of a relation triplet, following FINER App. B.4's two surface forms.

    ``mode="a"`` asks for the subject given the object (``What is standing on the floor with ...?``);
    ``mode="b"`` asks for the object given the subject (``What is the duck with ... standing on?``), which
    needs an ``is``/``are`` relation. The paper phrased these with Gemini; we use the two fixed patterns.
    """
    if mode == "a":
        return f"What {relation_text(rel, context_phrase)}?"
    if not rel.startswith(_AUXILIARIES):
        return None
    auxiliary, _, verb = rel.partition(" ")
    for article in _TRAILING_ARTICLES:
        if verb.endswith(article):
            verb = verb[: -len(article)]
    return f"What {auxiliary} the {context_phrase} {verb}?"


def correction_sentence(context: str, wrong: str, right: str) -> str:
    """WH training answer that denies a wrong attribute and restores the right one (FINER Fig. 23 forms)."""
    plural = is_plural(context)
    if wrong.startswith("with ") and right.startswith("with "):
        verb, has, pronoun = ("do not have", "have", "they") if plural else ("does not have", "has", "it")
        return f"The {context} {verb} {wrong[5:]}, but {pronoun} {has} {right[5:]}."
    verb, pronoun = ("are not", "they are") if plural else ("is not", "it is")
    return f"The {context} {verb} {wrong}, but {pronoun} {right}."


def tuples_for_image(graph: SceneGraph, rng: random.Random, skipped: Counter[str]) -> list[PreferenceTuple]:
    """Up to eight tuples (four subsets x two configurations) for one scene graph.

    Ψ− differs from Ψ+ in exactly one unit: the k-th object, one attribute, or one relation clause, chosen
    at random among those that have a negative not also present in the image (FINER Sec. 3).
    """
    out: list[PreferenceTuple] = []
    names = graph.names
    unique = list({o.name.lower(): o for o in reversed(graph.objects)}.values())[::-1]

    # OBJ: 1-5 objects; the negative replaces one of them with one of its negatives.
    replaceable = [o for o in unique if usable_negatives(o.negatives, names)]
    if replaceable:
        target = rng.choice(replaceable)
        others = [o for o in unique if o is not target]
        chosen = [target, *rng.sample(others, rng.randint(1, min(MAX_UNITS, len(unique))) - 1)]
        rng.shuffle(chosen)
        positive = [with_article(o.name) for o in chosen]
        negative = list(positive)
        negative[chosen.index(target)] = with_article(rng.choice(usable_negatives(target.negatives, names)))
        out += compose("obj", join_and(positive), join_and(negative), rng)
    else:
        skipped["obj_no_object_with_negatives"] += 1

    # ATTR: one object with 1-5 attributes; one attribute is replaced.
    described = [o for o in graph.objects if editable_attributes(o)]
    if described:
        obj = rng.choice(described)
        editable = editable_attributes(obj)
        k = rng.choice(editable)
        keep = sample_in_order(rng, list(range(len(obj.attributes))), min(MAX_UNITS, len(obj.attributes)), k)
        values = [obj.attributes[i] for i in keep]
        edited = [
            rng.choice(usable_negatives(obj.attribute_negatives[i], {a.lower() for a in obj.attributes}))
            if i == k
            else obj.attributes[i]
            for i in keep
        ]
        head = with_article(obj.name)
        out += compose("attr", f"{head} {join_oxford(values)}", f"{head} {join_oxford(edited)}", rng)
    else:
        skipped["attr_no_attribute_with_negatives"] += 1

    # REL: one subject with 1-5 relations; one relation clause is replaced.
    subjects = [o for o in graph.objects if editable_relations(o)]
    if subjects:
        obj = rng.choice(subjects)
        k = rng.choice(editable_relations(obj))
        keep = sample_in_order(rng, list(range(len(obj.relations))), min(MAX_UNITS, len(obj.relations)), k)
        forbidden = {r.rel.lower() for r in obj.relations}
        clauses, edited = [], []
        for i in keep:
            rel = obj.relations[i]
            other = graph.object(rel.object).name
            clauses.append(relation_text(rel.rel, other))
            edited.append(
                relation_text(rng.choice(usable_negatives(rel.negatives, forbidden)), other) if i == k else clauses[-1]
            )
        out += compose(
            "rel", f"the {obj.name} that {join_oxford(clauses)}", f"the {obj.name} that {join_oxford(edited)}", rng
        )
    else:
        skipped["rel_no_relation_with_negatives"] += 1

    wh = wh_tuples(graph, rng)
    if wh:
        out += wh
    else:
        skipped["wh_no_relation_with_described_object"] += 1
    return out


def wh_tuples(graph: SceneGraph, rng: random.Random) -> list[PreferenceTuple]:
    """WH tuples from one relation triplet: a question about one object whose premise is an attribute of the
    other (the context); the negative question swaps one context attribute for a negative (FINER Sec. 3)."""
    options = []
    editable: dict[int, list[int]] = {}  # per object, computed once per graph (an object is in many triplets)

    def editable_of(obj: SceneObject) -> list[int]:
        if id(obj) not in editable:
            editable[id(obj)] = editable_attributes(obj)
        return editable[id(obj)]

    for rel in graph.relations:
        subject, obj = graph.object(rel.subject), graph.object(rel.object)
        if editable_of(obj):
            options.append((rel, "a", subject, obj))
        if editable_of(subject) and rel.rel.startswith(_AUXILIARIES):
            options.append((rel, "b", obj, subject))
    if not options:
        return []
    rel, mode, target, context = rng.choice(options)
    k = rng.choice(editable_of(context))
    keep = sample_in_order(rng, list(range(len(context.attributes))), min(MAX_UNITS, len(context.attributes)), k)
    right = context.attributes[k]
    wrong = rng.choice(usable_negatives(context.attribute_negatives[k], {a.lower() for a in context.attributes}))

    def context_phrase(value: str) -> str:
        return f"{context.name} {join_oxford([value if i == k else context.attributes[i] for i in keep])}"

    question_pos = (
        wh_question(mode, rel.rel, context_phrase(right)) or ""
    )  # mode "b" is only offered for is/are relations
    question_neg = wh_question(mode, rel.rel, context_phrase(wrong)) or ""
    target_attrs = target.attributes[:MAX_UNITS]
    answer_pos = (
        capitalize_first(with_article(target.name) + (f" {join_oxford(target_attrs)}" if target_attrs else "")) + "."
    )
    return compose_wh(question_pos, answer_pos, question_neg, correction_sentence(context.name, wrong, right))
