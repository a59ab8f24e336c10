"""``veritune build finer-contrast``: image-contrast preference pairs in the wording of FINER's yes/no probe
(FINER: "MLLMs Hallucinate under Fine-grained Negative Queries", arXiv 2603.17662, Sec. 1 and Fig. 1).

FINER-Tuning's tuples (``veritune build finer``) and the probe's own pairs differ between their twins in the
*text*: the positive and the negative question name different things, so a model can lower the loss by learning
which wordings tend to be false, without looking. Here the twins share the text and differ in the *image*: one
description of an object, at one of the probe's seven levels, is asked on the image where it is true (``Yes.``
chosen, ``No.`` rejected) and on another image of the same split where it is false (``No.`` chosen). Only the
image tells the two rows apart, the idea of mDPO's conditional preference ("mDPO: Conditional Preference
Optimization for Multimodal Large Language Models", arXiv 2406.11839, Sec. 3), here as two ordinary rows of
TRL's preference format (one image each) rather than a second loss term.

The descriptions are the positive descriptions of :mod:`data_builders.finer.yn` (same anchors, attribute order
and relation), so the pairs speak the probe's language level by level (levels 5 and 6 share their positive
description: it is written once, as level 5). The false image is drawn from up to ``candidates`` images of the
split: for level 1 (the object alone) an image without the object; from level 2 on an image that has the object
and on which the description is false: with ``false_image="random"`` (the default) any of them, drawn
uniformly; with ``"nearest"`` the one on which most of its elements hold (the nearest miss, FINER's
"fine-grained" negative, ties drawn); when no image with the object makes it false, any image without the
object. "False" is judged as the probe judges negatives: some element of the description (the object, one of
its attributes, the relation, the related object or its attribute) is held by no object of the image with that
name.

Output: the layout of ``veritune build finer`` (``train.jsonl``, ``validation.jsonl``, ``manifest.json``), rows
``{images, prompt, chosen, rejected, subset, polarity, template_id, source_image, source_id}`` with ``subset``
the level (``L1``..``L7``), ``polarity`` ``pos`` (the true image) or ``neg`` (the false one), ``template_id`` 0.
Subsampling (``max_tuples``) keeps or drops whole pairs. Everything is seeded, so a build is deterministic.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.finer_yn import LEVELS, QUESTION
from core.progress import progress_bar
from data_builders.finer.build import Reservoir, _base_manifest, split_missing, write_preference_dataset
from data_builders.finer.scene_graph import SceneGraph, load_scene_graphs, relation_text
from data_builders.finer.yn import (
    CHAIN_ATTRIBUTES,
    _description,
    _filled,
    _key,
    attribute_true,
    best_chain,
    object_present,
    relation_true,
)

YES, NO = "Yes.", "No."  # the probe's answer, limited to Yes or No (Fig. 1)
DEFAULT_CANDIDATES = 50
FALSE_IMAGES = ("nearest", "random")


@dataclass(frozen=True)
class Description:
    """What one description of an anchor object claims: its name and attributes, and optionally a relation to
    another object named ``other`` with ``other_attributes``."""

    name: str
    attributes: tuple[str, ...] = ()
    relation: str | None = None
    other: str | None = None
    other_attributes: tuple[str, ...] = ()

    def text(self) -> str:
        clause = None
        if self.relation is not None and self.other is not None:
            clause = relation_text(self.relation, _description(self.other, list(self.other_attributes)))
        return _description(self.name, list(self.attributes), clause)

    def holds(self, graph: SceneGraph) -> list[bool]:
        """Each element, judged on ``graph`` as the probe judges its negatives (by name, any instance)."""
        out = [object_present(graph, self.name)]
        out += [attribute_true(graph, self.name, a) for a in self.attributes]
        if self.relation is not None and self.other is not None:
            out.append(relation_true(graph, self.name, self.relation, self.other))
            out += [attribute_true(graph, self.other, a) for a in self.other_attributes]
        return out


@dataclass
class ContrastSettings:
    """``levels``: which of the probe's levels describe each anchor; ``anchors_per_image``: objects of distinct
    names per image (those whose descriptions fill the most levels first); ``candidates``: images examined when
    looking for the false one; ``false_image``: ``nearest`` (the nearest miss among them) or ``random``."""

    seed: int = 0
    levels: tuple[int, ...] = LEVELS
    anchors_per_image: int = 4
    candidates: int = DEFAULT_CANDIDATES
    # a random false image: the nearest miss costs the probe's positives (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base)
    false_image: str = "random"
    max_tuples: int = 160_000
    validation_ratio: float = 0.005

    def __post_init__(self) -> None:
        bad = [level for level in self.levels if level not in LEVELS]
        if bad or not self.levels:
            raise UserError(f"--levels {','.join(map(str, self.levels))}: each level must be one of 1..7")
        if self.anchors_per_image < 1:
            raise UserError("--anchors-per-image: must be at least 1")
        if self.false_image not in FALSE_IMAGES:
            raise UserError(f"--false-image {self.false_image}: choose {' or '.join(FALSE_IMAGES)}")
        if self.candidates < 1:
            raise UserError("--candidates: must be at least 1")
        if self.max_tuples < 2:
            raise UserError(f"--max-tuples {self.max_tuples}: must be at least 2 (one pair)")
        if not 0 <= self.validation_ratio < 0.5:
            raise UserError(f"--validation-ratio {self.validation_ratio}: must be in [0, 0.5)")


def descriptions(
    graph: SceneGraph, settings: ContrastSettings, rng: random.Random
) -> list[tuple[str, int, Description]]:
    """``(sample, level, description)`` for the image's anchors: each level's positive description (the probe's
    chain), a level whose description repeats a lower one's (level 6 after level 5) left out."""
    chains = [best_chain(graph, anchor, rng) for anchor in graph.objects]
    scores = [_filled(graph, c) for c in chains]
    order = sorted(range(len(chains)), key=lambda i: (-scores[i], rng.random()))
    chosen = []
    for i in order:
        if _key(chains[i].anchor.name) not in {_key(c.anchor.name) for c in chosen}:
            chosen.append(chains[i])
    out = []
    for chain in chosen[: settings.anchors_per_image]:
        anchor = chain.anchor
        attrs = tuple(anchor.attributes[i] for i in chain.attributes)
        sample = f"{graph.example_id}/o{anchor.index}"
        seen: set[Description] = set()
        for level in sorted(settings.levels):
            if level == 1:
                desc = Description(anchor.name)
            elif level in (2, 3, 4):
                if len(attrs) < level - 1:
                    continue
                desc = Description(anchor.name, attrs[: level - 1])
            else:
                if len(attrs) < CHAIN_ATTRIBUTES or chain.relation is None:
                    continue
                other = graph.object(chain.relation.object)
                extra: tuple[str, ...] = ()
                if level == 7:
                    if not other.attributes:
                        continue
                    index = chain.other_attribute if chain.other_attribute is not None else 0
                    extra = (other.attributes[index],)
                desc = Description(anchor.name, attrs[:CHAIN_ATTRIBUTES], chain.relation.rel, other.name, extra)
            if desc not in seen:
                seen.add(desc)
                out.append((sample, level, desc))
    return out


def false_image(
    desc: Description,
    source: int,
    graphs: list[SceneGraph],
    with_name: dict[str, list[int]],
    settings: ContrastSettings,
    rng: random.Random,
) -> tuple[int, str] | None:
    """An image (index) on which ``desc`` is false, and how it was found; None when none is."""
    holders = [i for i in with_name.get(_key(desc.name), []) if i != source]
    if desc.attributes or desc.relation:
        pool = rng.sample(holders, min(settings.candidates, len(holders)))
        scored = []
        for i in pool:
            held = desc.holds(graphs[i])
            if not all(held):
                scored.append((sum(held), rng.random(), i))
        if scored and settings.false_image == "random":
            return rng.choice(scored)[2], "random_miss"
        if scored:
            return max(scored)[2], "nearest_miss"
    holding = set(holders) | {source}
    for _ in range(settings.candidates):  # rejection sampling: most images lack any one object
        i = rng.randrange(len(graphs))
        if i not in holding:
            return i, "object_absent"
    absent = [i for i in range(len(graphs)) if i not in holding]
    return (rng.choice(absent), "object_absent") if absent else None


def _row(graph: SceneGraph, question: str, true: bool, level: int, source_id: str) -> dict[str, Any]:
    chosen, rejected = (YES, NO) if true else (NO, YES)
    return {
        "images": [graph.image],
        "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}],
        "chosen": [{"role": "assistant", "content": [{"type": "text", "text": chosen}]}],
        "rejected": [{"role": "assistant", "content": [{"type": "text", "text": rejected}]}],
        "subset": f"L{level}",
        "polarity": "pos" if true else "neg",
        "template_id": 0,
        "source_image": graph.image,
        "source_id": source_id,
    }


def build_finer_contrast(
    scene_graphs: Path, image_root: Path, out_dir: Path, settings: ContrastSettings
) -> dict[str, Any]:
    """Write the image-contrast pairs (train/validation JSONL and ``manifest.json``); returns the manifest."""
    graphs = load_scene_graphs(scene_graphs)
    skipped: Counter[str] = Counter()
    graphs, missing = split_missing(graphs, image_root, skipped)
    if len(graphs) < 2:
        raise UserError(f"{scene_graphs}: image-contrast pairs need at least two images with their files present")
    with_name: dict[str, list[int]] = defaultdict(list)
    for i, graph in enumerate(graphs):
        for name in {_key(o.name) for o in graph.objects}:
            with_name[name].append(i)
    rng = random.Random(f"{settings.seed}:contrast")
    pairs = Reservoir(max(1, settings.max_tuples // 2), random.Random(f"{settings.seed}:contrast:sample"))
    how: Counter[str] = Counter()
    for i, graph in enumerate(progress_bar(graphs, desc="image-contrast pairs", unit="image")):
        for sample, level, desc in descriptions(graph, settings, rng):
            found = false_image(desc, i, graphs, with_name, settings, rng)
            if found is None:
                skipped[f"L{level}_no_image_where_false"] += 1
                continue
            j, kind = found
            how[f"L{level}_{kind}"] += 1
            question = QUESTION.format(x=desc.text())
            source_id = f"{sample}/L{level}"
            pairs.add(
                {
                    "subset": f"L{level}",
                    "rows": [
                        _row(graph, question, True, level, source_id),
                        _row(graphs[j], question, False, level, source_id),
                    ],
                }
            )
    rows = Reservoir(2 * pairs.capacity, rng)
    rows.items = [row for pair in pairs.items for row in pair["rows"]]
    rows.seen = 2 * pairs.seen
    rows.built = Counter({subset: 2 * n for subset, n in pairs.built.items()})
    manifest = _base_manifest(
        "scene_graphs",
        scene_graphs,
        image_root,
        seed=settings.seed,
        max_tuples=settings.max_tuples,
        validation_ratio=settings.validation_ratio,
    )
    manifest.update(
        {
            "kind": "image-contrast",
            "levels": list(settings.levels),
            "anchors_per_image": settings.anchors_per_image,
            "candidates": settings.candidates,
            "false_image_choice": settings.false_image,
            "answers": [YES, NO],
            "false_image": dict(sorted(how.items())),
            "images": {"records": len(graphs) + len(missing), "used": len(graphs)},
        }
    )
    return write_preference_dataset(
        rows,
        out_dir,
        validation_ratio=settings.validation_ratio,
        rng=random.Random(f"{settings.seed}:contrast:split"),
        manifest=manifest,
        skipped=skipped,
        missing_images=missing,
    )
