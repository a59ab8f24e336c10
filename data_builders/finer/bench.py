"""``veritune build finer-bench``: FINER multiple-choice questions from positive and negative scene graphs
(FINER Sec. 2.1 and App. B.4), written in the layout of the public FINER MCQ files.

Multi-obj / Multi-attr / Multi-rel: ``k`` entities of one kind are joined into a positive phrase P+; one
of them is replaced by each of its four negatives, giving P−1..P−4. The positive MCQ asks about P+ (answer
"Yes, I can see P+ ..."); the negative MCQ asks about a randomly chosen P−c (answer "No, but I can see
P+ ..."), with the other corrupted phrases as distractors. Wh: for a relation triplet, one object is the
answer target and the other the context; the positive question carries a true context attribute A+ (answer:
the target), the negative one a negative attribute A− (answer: the correction sentence). Choices are
shuffled with a seeded generator.

Output: CSV with the columns of the public release, in order (``image, qtype, question, choice1..choice5,
gt_index``, then veritune's ``k``), ``gt_index`` 0-based, ``qtype`` = ``<setting>_pos`` / ``<setting>_neg``,
each positive row immediately followed by its negative row (the official paired-accuracy script pairs rows 2i
and 2i+1).
"""

from __future__ import annotations

import csv
import io
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from core.errors import UserError
from core.io import atomic_write_json, atomic_write_text, package_versions, sha256_file
from data_builders.finer.build import MANIFEST_PACKAGES, split_missing
from data_builders.finer.filtering import DEFAULT_THRESHOLDS, filter_negatives
from data_builders.finer.scene_graph import (
    SceneGraph,
    SceneObject,
    editable_attributes,
    editable_relations,
    load_scene_graphs,
    relation_text,
    sample_in_order,
    usable_negatives,
    wh_question,
)
from data_builders.finer.templates import join_oxford

SETTINGS = ("multi_obj", "multi_attr", "multi_rel", "wh")
CSV_COLUMNS = ("image", "qtype", "question", "choice1", "choice2", "choice3", "choice4", "choice5", "gt_index")
# One column past the public layout: the entity count k of a Multi-* pair (empty for Wh), so that the
# eval hook can report paired accuracy per k. Readers of the public layout select columns by name.
EXTRA_COLUMNS = ("k",)
NUM_NEGATIVES = 4  # one correct answer and four distractors (FINER Sec. 2.4)
MAX_CONTEXT_ATTRIBUTES = 5  # Wh: all attributes of the context object are shown (App. B.4), at most five

# FINER App. B.4, fixed question template.
QUESTION = "Can you see {x} in this image?"
YES = "Yes, I can see {y} in this image."
NO_BUT = "No, but I can see {z} in this image."


@dataclass
class BenchSettings:
    """Entity counts per question (FINER-CompreCap: at most 6 objects, 3 attributes, 3 relations)."""

    max_objects: int = 6
    max_attributes: int = 3
    max_relations: int = 3
    settings: tuple[str, ...] = SETTINGS
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [s for s in self.settings if s not in SETTINGS]
        if unknown:
            raise UserError(f"--settings: unknown setting {unknown[0]!r}; choose from {', '.join(SETTINGS)}")
        for name in ("max_objects", "max_attributes", "max_relations"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')}: must be at least 1")


@dataclass
class BenchStats:
    pairs: Counter[str] = field(default_factory=Counter)  # "multi_obj_k3" -> pairs
    skipped: Counter[str] = field(default_factory=Counter)
    missing_images: list[str] = field(default_factory=list)


def _row(image: str, qtype: str, question: str, choices: list[str], correct: str, rng: random.Random) -> dict[str, Any]:
    order = list(choices)
    rng.shuffle(order)
    row: dict[str, Any] = {"image": image, "qtype": qtype, "question": question}
    row.update({f"choice{i}": text for i, text in enumerate(order, start=1)})
    row["gt_index"] = order.index(correct)
    return row


def existence_pair(
    image: str, setting: str, positive: str, corrupted: list[str], rng: random.Random
) -> list[dict[str, Any]] | None:
    """q+ and q− for a positive phrase and its four corrupted phrases (FINER App. B.4)."""
    if len({positive, *corrupted}) != 1 + NUM_NEGATIVES:
        return None
    yes_pos = YES.format(y=positive)
    pos = _row(
        image,
        f"{setting}_pos",
        QUESTION.format(x=positive),
        [yes_pos, *(NO_BUT.format(z=z) for z in corrupted)],
        yes_pos,
        rng,
    )
    c = rng.randrange(NUM_NEGATIVES)  # each corrupted phrase is equally likely to become the query
    query = corrupted[c]
    correct = NO_BUT.format(z=positive)
    others = [NO_BUT.format(z=z) for j, z in enumerate(corrupted) if j != c]
    neg = _row(image, f"{setting}_neg", QUESTION.format(x=query), [YES.format(y=query), correct, *others], correct, rng)
    return [pos, neg]


def _negatives(rng: random.Random, negatives: list[str], forbidden: set[str]) -> list[str] | None:
    usable = usable_negatives(negatives, forbidden)
    return rng.sample(usable, NUM_NEGATIVES) if len(usable) >= NUM_NEGATIVES else None


def multi_obj_pairs(graph: SceneGraph, k: int, rng: random.Random) -> list[dict[str, Any]] | None:
    unique = list({o.name.lower(): o for o in reversed(graph.objects)}.values())[::-1]
    names = graph.names
    replaceable = [o for o in unique if len(usable_negatives(o.negatives, names)) >= NUM_NEGATIVES]
    if len(unique) < k or not replaceable:
        return None
    target = rng.choice(replaceable)
    chosen = [target, *rng.sample([o for o in unique if o is not target], k - 1)]
    rng.shuffle(chosen)
    position = chosen.index(target)
    negatives = _negatives(rng, target.negatives, names)
    phrase = [o.name for o in chosen]
    corrupted = [join_oxford(phrase[:position] + [n] + phrase[position + 1 :]) for n in negatives or []]
    return existence_pair(graph.image, "multi_obj", join_oxford(phrase), corrupted, rng)


def multi_attr_pairs(graph: SceneGraph, k: int, rng: random.Random) -> list[dict[str, Any]] | None:
    candidates = [o for o in graph.objects if len(o.attributes) >= k and editable_attributes(o, NUM_NEGATIVES)]
    if not candidates:
        return None
    obj = rng.choice(candidates)
    target = rng.choice(editable_attributes(obj, NUM_NEGATIVES))
    keep = sample_in_order(rng, list(range(len(obj.attributes))), k, target)
    negatives = _negatives(rng, obj.attribute_negatives[target], {a.lower() for a in obj.attributes})

    def phrase(value: str | None) -> str:
        values = [value if (i == target and value) else obj.attributes[i] for i in keep]
        return f"the {obj.name} {join_oxford(values)}"

    return existence_pair(graph.image, "multi_attr", phrase(None), [phrase(n) for n in negatives or []], rng)


def multi_rel_pairs(graph: SceneGraph, k: int, rng: random.Random) -> list[dict[str, Any]] | None:
    candidates = [o for o in graph.objects if len(o.relations) >= k and editable_relations(o, NUM_NEGATIVES)]
    if not candidates:
        return None
    obj = rng.choice(candidates)
    target = rng.choice(editable_relations(obj, NUM_NEGATIVES))
    keep = sample_in_order(rng, list(range(len(obj.relations))), k, target)
    negatives = _negatives(rng, obj.relations[target].negatives, {r.rel.lower() for r in obj.relations})

    def phrase(value: str | None) -> str:
        clauses = [
            relation_text(
                value if (i == target and value) else obj.relations[i].rel, graph.object(obj.relations[i].object).name
            )
            for i in keep
        ]
        return f"the {obj.name} that {join_oxford(clauses)}"

    return existence_pair(graph.image, "multi_rel", phrase(None), [phrase(n) for n in negatives or []], rng)


def _object_option(name: str, target: SceneObject) -> str:
    attributes = target.attributes[:MAX_CONTEXT_ATTRIBUTES]
    return f"The {name}" + (f" {join_oxford(attributes)}" if attributes else "") + "."


def _wh_question(mode: str, rel: str, context: SceneObject, keep: list[int], k: int, value: str) -> str:
    """The Wh question with the context's attributes, attribute ``k`` set to ``value`` (A+ or A−)."""
    shown = [value if i == k else context.attributes[i] for i in keep]
    return wh_question(mode, rel, f"{context.name} {join_oxford(shown)}") or ""


def wh_pairs(graph: SceneGraph, rng: random.Random, stats: BenchStats) -> list[dict[str, Any]]:
    """One q+/q− pair per relation triplet whose context object has an attribute with a negative and whose
    target has at least three negative objects (FINER App. B.4)."""
    rows: list[dict[str, Any]] = []
    for rel in graph.relations:
        subject, obj = graph.object(rel.subject), graph.object(rel.object)
        modes = []
        if editable_attributes(obj) and len(usable_negatives(subject.negatives, graph.names)) >= 3:
            modes.append(("a", subject, obj))
        if (
            editable_attributes(subject)
            and len(usable_negatives(obj.negatives, graph.names)) >= 3
            and rel.rel.startswith(("is ", "are "))
        ):
            modes.append(("b", obj, subject))
        if not modes:
            stats.skipped["wh_triplet_without_described_context_or_target_negatives"] += 1
            continue
        mode, target, context = rng.choice(modes)
        k = rng.choice(editable_attributes(context))
        keep = sample_in_order(
            rng, list(range(len(context.attributes))), min(MAX_CONTEXT_ATTRIBUTES, len(context.attributes)), k
        )
        right = context.attributes[k]
        wrong = rng.choice(usable_negatives(context.attribute_negatives[k], {a.lower() for a in context.attributes}))

        objects = [
            _object_option(n, target)
            for n in [target.name, *rng.sample(usable_negatives(target.negatives, graph.names), 3)]
        ]
        correct_object = objects[0]
        correction_pos = f"The {context.name} is not {right}, but is {wrong}."
        correction_neg = f"The {context.name} is not {wrong}, but is {right}."
        if len(set(objects)) != 4:
            stats.skipped["wh_duplicate_options"] += 1
            continue
        question_pos, question_neg = (_wh_question(mode, rel.rel, context, keep, k, value) for value in (right, wrong))
        rows.append(_row(graph.image, "wh_pos", question_pos, [*objects, correction_pos], correct_object, rng))
        rows.append(_row(graph.image, "wh_neg", question_neg, [*objects, correction_neg], correction_neg, rng))
        stats.pairs["wh"] += 1
    return rows


def build_mcqs(graphs: list[SceneGraph], settings: BenchSettings, stats: BenchStats) -> list[dict[str, Any]]:
    """All MCQ rows, grouped by setting, each positive row followed by its negative row."""
    by_setting: dict[str, list[dict[str, Any]]] = {s: [] for s in settings.settings}
    limits = {
        "multi_obj": settings.max_objects,
        "multi_attr": settings.max_attributes,
        "multi_rel": settings.max_relations,
    }
    builders = {"multi_obj": multi_obj_pairs, "multi_attr": multi_attr_pairs, "multi_rel": multi_rel_pairs}
    for graph in tqdm(graphs, desc="FINER MCQs", unit="image", disable=len(graphs) < 500):
        rng = random.Random(f"{settings.seed}:{graph.example_id}:{graph.image}")
        for setting in settings.settings:
            if setting == "wh":
                by_setting["wh"] += wh_pairs(graph, rng, stats)
                continue
            for k in range(1, limits[setting] + 1):
                pair = builders[setting](graph, k, rng)
                if pair is None:
                    stats.skipped[f"{setting}_k{k}_not_enough_entities_or_negatives"] += 1
                    continue
                for row in pair:
                    row["k"] = k
                by_setting[setting] += pair
                stats.pairs[f"{setting}_k{k}"] += 1
    return [row for setting in settings.settings for row in by_setting[setting]]


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS + EXTRA_COLUMNS, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def filter_bench_negatives(
    graphs: list[SceneGraph],
    image_root: Path,
    discriminator: Any,
    thresholds: dict[str, float] | None,
    client: Any,
    attempts: int,
    rounds: int,
    seed: int,
    out: Path,
) -> dict[str, Any]:
    """Filter (and with ``client`` regenerate) the graphs' negatives (App. B.3); returns the manifest's summary."""
    thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    result = filter_negatives(
        graphs,
        image_root,
        discriminator,
        thresholds=thresholds,
        client=client,
        attempts=attempts,
        rounds=rounds,
        seed=seed,
        log_path=out.with_name(out.stem + ".filter_log.jsonl"),
    )
    return {
        "model": discriminator.name,
        "thresholds": thresholds,
        "rounds": rounds,
        "regenerate_with_llm": client is not None,
        "levels": result.summary(),
    }


def bench_manifest(
    scene_graphs: Path,
    image_root: Path | None,
    settings: BenchSettings,
    rows: list[dict[str, Any]],
    stats: BenchStats,
    filter_summary: dict[str, Any] | None,
    build: dict[str, Any] | None,
) -> dict[str, Any]:
    """The manifest written beside the MCQ CSV: source, settings, counts, skips, filter and versions."""
    return {
        "format": "finer-mcq-csv",
        "columns": list(CSV_COLUMNS + EXTRA_COLUMNS),
        "source": str(scene_graphs),
        "source_sha256": sha256_file(scene_graphs),
        "image_root": str(image_root.resolve()) if image_root else None,
        "settings": {
            "max_objects": settings.max_objects,
            "max_attributes": settings.max_attributes,
            "max_relations": settings.max_relations,
            "settings": list(settings.settings),
        },
        "seed": settings.seed,
        "counts": {
            "rows": len(rows),
            "pairs": len(rows) // 2,
            "pairs_by_setting_and_k": dict(sorted(stats.pairs.items())),
        },
        "skipped": dict(sorted(stats.skipped.items())),
        "missing_images": stats.missing_images,
        "filter": filter_summary,
        "versions": package_versions(MANIFEST_PACKAGES),
        "build": build,
    }


def build_finer_bench(
    scene_graphs: Path,
    out: Path,
    settings: BenchSettings,
    *,
    image_root: Path | None = None,
    discriminator: Any = None,
    thresholds: dict[str, float] | None = None,
    client: Any = None,
    attempts: int = 3,
    filter_rounds: int = 3,
    build: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the MCQ CSV and ``<out stem>.manifest.json``; returns the manifest (``build``: the build's
    identity, :func:`core.io.build_identity`, recorded so that a rerun recognises its own output).

    With ``image_root``, records whose image is missing are skipped and listed. With a ``discriminator``
    (which needs ``image_root``), negatives are filtered first (App. B.3), regenerated with ``client`` when
    given; the classifications are logged to ``<out stem>.filter_log.jsonl``.
    """
    graphs = load_scene_graphs(scene_graphs)
    stats = BenchStats()
    if image_root is not None:
        graphs, stats.missing_images = split_missing(graphs, image_root, stats.skipped)
    filter_summary = None
    if discriminator is not None:
        if image_root is None:
            raise UserError("--filter-model: needs --image-root (the discriminator looks at the images)")
        filter_summary = filter_bench_negatives(
            graphs, image_root, discriminator, thresholds, client, attempts, filter_rounds, settings.seed, out
        )
    rows = build_mcqs(graphs, settings, stats)
    if not rows:
        raise UserError(f"{scene_graphs}: no MCQ could be built (skipped: {dict(stats.skipped)})")
    atomic_write_text(out, to_csv(rows))
    manifest = bench_manifest(scene_graphs, image_root, settings, rows, stats, filter_summary, build)
    atomic_write_json(out.with_name(out.stem + ".manifest.json"), manifest)
    return manifest
