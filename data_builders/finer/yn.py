"""``veritune build finer-bench --protocol yn``: FINER's yes/no granularity probe (FINER: "MLLMs Hallucinate
under Fine-grained Negative Queries", arXiv 2603.17662, Sec. 1 and Fig. 1), from the same scene graphs as the
MCQ benchmark (:mod:`data_builders.finer.bench`).

The motivation study of Sec. 1 describes one object of an image ever more finely, "starting with a single
object, adding attributes, and then relations", and asks seven negative queries, each "injecting a single,
fine-grained contradiction (NEG_OBJ, NEG_ATTR, or NEG_REL) while keeping the rest of the description visually
consistent" (Fig. 1a), with the answer limited to "Yes" or "No". For an anchor object A with attributes a1..a3
and a relation r to an object B that has an attribute b:

    L1 [NEG_OBJ]                              Can you see the wolf in this image?
    L2 [OBJ][NEG_ATTR]                        Can you see the cat ¬a1 in this image?
    L3 [OBJ][ATTR][NEG_ATTR]                  Can you see the cat a1, ¬a2 in this image?
    L4 [OBJ][ATTR][ATTR][NEG_ATTR]            Can you see the cat a1, a2, ¬a3 in this image?
    L5 [OBJ][ATTR]x3[NEG_REL][OBJ]            Can you see the cat a1, a2, a3, that ¬r the chair in this image?
    L6 [OBJ][ATTR]x3[REL][NEG_OBJ]            Can you see the cat a1, a2, a3, that r the sofa in this image?
    L7 [OBJ][ATTR]x3[REL][OBJ][NEG_ATTR]      Can you see the cat a1, a2, a3, that r the chair ¬b in this image?

(the wording of Fig. 1a, whose attributes are "with ..." phrases as in the FINER scene graphs: "Can you see the
cat with predominantly white coat featuring black and grey markings, with its head turned downwards, with
perked ears, that is sitting on the chair in this image?"). Each negative query has its positive twin, the same
description with nothing negated (answer "Yes"), as Sec. 2.1 pairs every q− with a q+; Fig. 1's own positive
queries are these twins. A level that a graph cannot fill (no third attribute, no relation, no usable negative)
is skipped and counted in the manifest.

Negatives come from the graph's own negative lists (``neg_object``, ``neg_attribute``, ``neg_relation``) and
are never true of the image: a negative object is no object of the image; a negative attribute is no
attribute of any object of the image with the same name; a negative relation links no two objects of the image
with those names. Everything is drawn from a generator seeded by the seed and the image, so a build is
deterministic.

Output: CSV, one row per query, the positive row immediately followed by its negative twin, with the columns
``image, sample, level, pattern, polarity, negated, question, answer`` (``answer`` yes/no; ``negated`` obj,
attr or rel; ``sample`` names the image and anchor object), and ``<out stem>.manifest.json`` (counts per
level, skipped levels with their reason, seed, versions).
"""

from __future__ import annotations

import csv
import functools
import io
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.finer_yn import COLUMNS, LEVELS, NEGATED, PATTERNS, QUESTION
from core.io import atomic_write_json, atomic_write_text, package_versions, sha256_file
from data_builders.finer.build import MANIFEST_PACKAGES, split_missing
from data_builders.finer.scene_graph import Relation, SceneGraph, SceneObject, load_scene_graphs, relation_text

CHAIN_ATTRIBUTES = 3  # levels 5-7 describe the anchor with three attributes (Fig. 1a)


@dataclass
class YnSettings:
    """``anchors_per_image``: how many objects of one image (distinct names, those filling the most levels
    first) each get their seven queries (the paper: one description per sample)."""

    seed: int = 0
    anchors_per_image: int = 1

    def __post_init__(self) -> None:
        if self.anchors_per_image < 1:
            raise UserError("--anchors-per-image: must be at least 1")


@dataclass
class YnStats:
    pairs: Counter[str] = field(default_factory=Counter)  # "L3" -> pairs
    skipped: Counter[str] = field(default_factory=Counter)  # "L4_fewer_than_3_attributes" -> samples
    samples: int = 0
    missing_images: list[str] = field(default_factory=list)


# ---- what is true of the image


@functools.cache  # a few hundred distinct names and attributes, asked about millions of times by the builders
def _key(text: str) -> str:
    return " ".join(text.lower().split())


def object_present(graph: SceneGraph, name: str) -> bool:
    """Is an object called ``name`` in the image?"""
    key = _key(name)
    return any(_key(o.name) == key for o in graph.objects)


def attribute_true(graph: SceneGraph, name: str, attribute: str) -> bool:
    """Does any object of the image called ``name`` have ``attribute``?"""
    name_key, attribute_key = _key(name), _key(attribute)
    return any(_key(o.name) == name_key and any(_key(a) == attribute_key for a in o.attributes) for o in graph.objects)


def relation_true(graph: SceneGraph, subject: str, rel: str, obj: str) -> bool:
    """Does ``rel`` link an object called ``subject`` to one called ``obj`` anywhere in the image?"""
    subject_key, rel_key, obj_key = _key(subject), _key(rel), _key(obj)
    return any(
        _key(graph.object(r.subject).name) == subject_key
        and _key(r.rel) == rel_key
        and _key(graph.object(r.object).name) == obj_key
        for r in graph.relations
    )


def _distinct(values: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for value in values:
        if _key(value) not in seen:
            seen.add(_key(value))
            out.append(value)
    return out


def negative_objects(graph: SceneGraph, obj: SceneObject) -> list[str]:
    """``obj``'s negatives that name no object of the image."""
    return [n for n in _distinct(obj.negatives) if not object_present(graph, n)]


def negative_attributes(graph: SceneGraph, obj: SceneObject, index: int) -> list[str]:
    """The negatives of ``obj``'s attribute ``index`` that no object of the image with its name has."""
    return [n for n in _distinct(obj.attribute_negatives[index]) if not attribute_true(graph, obj.name, n)]


def negative_relations(graph: SceneGraph, rel: Relation) -> list[str]:
    """The negatives of ``rel`` that link no two objects of the image with its subject's and object's names."""
    subject, obj = graph.object(rel.subject).name, graph.object(rel.object).name
    return [n for n in _distinct(rel.negatives) if not relation_true(graph, subject, n, obj)]


# ---- one sample: an anchor object's seven levels


@dataclass
class Chain:
    """An anchor object's description: up to three attributes (their order fixes which one each of L2-L4
    negates) and an optional relation with an attribute of its other object."""

    anchor: SceneObject
    attributes: list[int]
    relation: Relation | None
    other_attribute: int | None


def _reasons(graph: SceneGraph, chain: Chain) -> dict[int, str | None]:
    """Per level: None when it can be filled, else why not."""
    anchor, attrs = chain.anchor, chain.attributes
    out: dict[int, str | None] = {1: None if negative_objects(graph, anchor) else "no_usable_object_negative"}
    for level, position in ((2, 0), (3, 1), (4, 2)):
        if len(attrs) <= position:
            out[level] = f"fewer_than_{position + 1}_attributes"
        elif not negative_attributes(graph, anchor, attrs[position]):
            out[level] = "no_usable_attribute_negative"
        else:
            out[level] = None
    for level in (5, 6, 7):
        if len(attrs) < CHAIN_ATTRIBUTES:
            out[level] = f"fewer_than_{CHAIN_ATTRIBUTES}_attributes"
        elif chain.relation is None:
            out[level] = "no_relation"
        else:
            out[level] = None
    if chain.relation is not None and len(attrs) >= CHAIN_ATTRIBUTES:
        other = graph.object(chain.relation.object)
        if not negative_relations(graph, chain.relation):
            out[5] = "no_usable_relation_negative"
        if not negative_objects(graph, other):
            out[6] = "no_usable_object_negative_for_the_related_object"
        if chain.other_attribute is None:
            out[7] = "related_object_has_no_attribute_with_a_usable_negative"
    return out


def _filled(graph: SceneGraph, chain: Chain) -> int:
    return sum(reason is None for reason in _reasons(graph, chain).values())


def best_chain(graph: SceneGraph, anchor: SceneObject, rng: random.Random) -> Chain:
    """The description of ``anchor`` that fills the most levels: attributes with a usable negative first
    (in a seeded random order), and the relation whose levels 5-7 fill best (ties broken at random)."""
    order = list(range(len(anchor.attributes)))
    rng.shuffle(order)
    order.sort(key=lambda i: not negative_attributes(graph, anchor, i))  # stable: editable ones first
    attributes = order[:CHAIN_ATTRIBUTES]
    chains = []
    for rel in anchor.relations:
        other = graph.object(rel.object)
        editable = [i for i in range(len(other.attributes)) if negative_attributes(graph, other, i)]
        chains.append(Chain(anchor, attributes, rel, rng.choice(editable) if editable else None))
    if not chains:
        return Chain(anchor, attributes, None, None)
    scores = [_filled(graph, c) for c in chains]
    best = [c for c, s in zip(chains, scores) if s == max(scores)]
    return rng.choice(best)


def _description(name: str, attributes: list[str], clause: str | None = None) -> str:
    """``cat`` + ``[with a, with b]`` + ``is on the chair`` -> ``cat with a, with b, that is on the chair``."""
    text = " ".join([name, ", ".join(attributes)]) if attributes else name
    return f"{text}, that {clause}" if clause else text


def level_pair(graph: SceneGraph, chain: Chain, level: int, rng: random.Random) -> tuple[str, str]:
    """The positive and the negative query of ``level`` (the level must be fillable)."""
    anchor = chain.anchor
    attrs = [anchor.attributes[i] for i in chain.attributes]
    if level == 1:
        wrong = rng.choice(negative_objects(graph, anchor))
        return QUESTION.format(x=anchor.name), QUESTION.format(x=wrong)
    if level in (2, 3, 4):
        position = level - 2
        shown = attrs[: position + 1]
        wrong = rng.choice(negative_attributes(graph, anchor, chain.attributes[position]))
        return (
            QUESTION.format(x=_description(anchor.name, shown)),
            QUESTION.format(x=_description(anchor.name, [*shown[:-1], wrong])),
        )
    assert chain.relation is not None
    rel, other = chain.relation, graph.object(chain.relation.object)
    three = attrs[:CHAIN_ATTRIBUTES]
    other_name, wrong_other_name = other.name, other.name
    rel_text, wrong_rel = rel.rel, rel.rel
    other_attrs: list[str] = []
    wrong_other_attrs: list[str] = []
    if level == 5:
        wrong_rel = rng.choice(negative_relations(graph, rel))
    elif level == 6:
        wrong_other_name = rng.choice(negative_objects(graph, other))
    else:
        assert chain.other_attribute is not None
        other_attrs = [other.attributes[chain.other_attribute]]
        wrong_other_attrs = [rng.choice(negative_attributes(graph, other, chain.other_attribute))]
    positive = relation_text(rel_text, _description(other_name, other_attrs))
    negative = relation_text(wrong_rel, _description(wrong_other_name, wrong_other_attrs))
    return (
        QUESTION.format(x=_description(anchor.name, three, positive)),
        QUESTION.format(x=_description(anchor.name, three, negative)),
    )


def _row(graph: SceneGraph, sample: str, level: int, polarity: str, question: str) -> dict[str, Any]:
    return {
        "image": graph.image,
        "sample": sample,
        "level": level,
        "pattern": PATTERNS[level],
        "polarity": polarity,
        "negated": NEGATED[level],
        "question": question,
        "answer": "yes" if polarity == "pos" else "no",
    }


def yn_rows(graph: SceneGraph, settings: YnSettings, stats: YnStats) -> list[dict[str, Any]]:
    """The queries of one image: per anchor (up to ``anchors_per_image`` objects of distinct names, those that fill
    the most levels first, ties drawn), each fillable level's positive row followed by its negative twin."""
    rng = random.Random(f"{settings.seed}:{graph.example_id}:{graph.image}:yn")
    chains = [best_chain(graph, anchor, rng) for anchor in graph.objects]
    scores = [_filled(graph, c) for c in chains]
    order = sorted(range(len(chains)), key=lambda i: (-scores[i], rng.random()))
    chosen: list[Chain] = []
    for i in order:  # one anchor per name: two "cat" samples would share their L1 query
        if scores[i] > 0 and _key(chains[i].anchor.name) not in {_key(c.anchor.name) for c in chosen}:
            chosen.append(chains[i])
    chosen = chosen[: settings.anchors_per_image]
    if not chosen:
        stats.skipped["image_without_a_fillable_level"] += 1
        return []
    rows: list[dict[str, Any]] = []
    for chain in chosen:
        sample = f"{graph.example_id}/o{chain.anchor.index}"
        stats.samples += 1
        for level, reason in _reasons(graph, chain).items():
            if reason is not None:
                stats.skipped[f"L{level}_{reason}"] += 1
                continue
            positive, negative = level_pair(graph, chain, level, rng)
            rows += [_row(graph, sample, level, "pos", positive), _row(graph, sample, level, "neg", negative)]
            stats.pairs[f"L{level}"] += 1
    return rows


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def build_finer_yn(
    scene_graphs: Path,
    out: Path,
    settings: YnSettings,
    *,
    image_root: Path | None = None,
    filter_negatives: Any = None,
    build: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the yes/no probe's CSV and ``<out stem>.manifest.json``; returns the manifest.

    With ``image_root``, records whose image is missing are skipped and listed. ``filter_negatives``, when
    given, is called with the loaded graphs (and ``out``) before any query is composed and returns the
    manifest's filter summary: the MCQ builder's App. B.3 filter, passed by the CLI.
    """
    graphs = load_scene_graphs(scene_graphs)
    stats = YnStats()
    if image_root is not None:
        graphs, stats.missing_images = split_missing(graphs, image_root, stats.skipped)
    filter_summary = filter_negatives(graphs, out) if filter_negatives is not None else None
    rows = [row for graph in graphs for row in yn_rows(graph, settings, stats)]
    if not rows:
        raise UserError(f"{scene_graphs}: no yes/no query could be built (skipped: {dict(stats.skipped)})")
    atomic_write_text(out, to_csv(rows))
    manifest = {
        "format": "finer-yn-csv",
        "protocol": "yn",
        "columns": list(COLUMNS),
        "source": str(scene_graphs),
        "source_sha256": sha256_file(scene_graphs),
        "image_root": str(image_root.resolve()) if image_root else None,
        "seed": settings.seed,
        "anchors_per_image": settings.anchors_per_image,
        "patterns": {f"L{level}": PATTERNS[level] for level in LEVELS},
        "counts": {
            "rows": len(rows),
            "pairs": len(rows) // 2,
            "samples": stats.samples,
            "pairs_by_level": {f"L{level}": stats.pairs[f"L{level}"] for level in LEVELS},
        },
        "skipped": dict(sorted(stats.skipped.items())),
        "missing_images": stats.missing_images,
        "filter": filter_summary,
        "versions": package_versions(MANIFEST_PACKAGES),
        "build": build,
    }
    atomic_write_json(out.with_name(out.stem + ".manifest.json"), manifest)
    return manifest
