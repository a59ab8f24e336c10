"""The ORIC pipeline: annotations → ROI split → judged positives → CLIP-guided negatives → questions →
the official ORIC release format, with provenance fields and a manifest.

Pairs follow the public ORIC builder, whose output is the official release: a query image I gives the
"yes" questions (its ROI objects the judge cannot predict from the non-ROI classes, Alg. 1) and its most
similar image I' gives the "no" questions (classes absent from I', ranked by CLIPScore(I', "an image
contains {name}"), Alg. 2). A negative is therefore never a class annotated in the image it is asked
about; it may be a class of I (the official bench does this in 59 of its 500 groups), which is what
makes it a plausible distractor. Each unordered pair is used once, and each file lists a pair's yes
questions, then its no questions, as the official files do.
"""

from __future__ import annotations

import gc
import operator
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json, manifest_path, package_versions, read_json, sha256_file
from core.progress import progress_bar
from data_builders.oric.annotations import ImageRecord, describe, load_instances, roi_split, size_tier
from data_builders.oric.clip_negatives import TEXT_TEMPLATE, ClipScorer, most_similar
from data_builders.oric.judges import Judge
from data_builders.oric.questions import r1_prompt, shared_paraphrases

JUDGE_CHUNK = 256  # query images whose judge queries are sent together (bounded memory, steady progress)


@dataclass
class BuildSettings:
    """What to build: the counts and the per-image numbers of questions."""

    kind: str  # "train" (R1 prompt, <SOLUTION> answers) or "bench" (four paraphrases, yes/no answers)
    num_yes: int
    num_no: int
    yes_per_image: int = 2
    no_per_image: int = 2
    min_classes: int = 2
    seed: int = 42


@dataclass
class BuildStats:
    """Counts of everything skipped, and why, with the image files that were missing or unreadable."""

    skipped: Counter[str] = field(default_factory=Counter)
    missing_images: list[str] = field(default_factory=list)
    unreadable_images: list[str] = field(default_factory=list)
    judge_answers: Counter[str] = field(default_factory=Counter)
    judge_unreadable_example: str | None = None  # an answer of the judge's with no yes/no in it


def build_items(
    images: list[ImageRecord],
    image_root: Path,
    class_names: list[str],
    judge: Judge,
    clip: ClipScorer,
    settings: BuildSettings,
    stats: BuildStats,
) -> list[dict[str, Any]]:
    """ORIC questions in the official layout plus provenance fields, up to the requested counts.

    Every image whose file exists and decodes is a candidate similar image I' (Alg. 2 searches all
    images, as the public builder does); images with at least ``min_classes`` classes are the query
    images I, visited in a seeded random order until both counts are reached.
    """
    present, embeddings = readable_images(images, image_root, clip, stats)
    queries = query_positions(present, image_root, settings, stats)
    rng = random.Random(settings.seed)
    rng.shuffle(queries)
    quota = Quota(settings)
    items: list[dict[str, Any]] = []
    seen_pairs: set[tuple[int, int]] = set()
    seen_questions: set[tuple[str, str]] = set()
    for start in range(0, len(queries), JUDGE_CHUNK):
        if quota.done():
            break
        chunk = queries[start : start + JUDGE_CHUNK]
        neighbours, similarities = most_similar(embeddings, chunk)  # exact, only for the images visited
        verdicts = judge_roi_objects([present[i] for i in chunk], judge, stats)
        for index, neighbour, similarity in zip(chunk, neighbours.tolist(), similarities.tolist()):
            if quota.done():
                break
            query, similar = present[index], present[neighbour]
            pair = (min(query.image_id, similar.image_id), max(query.image_id, similar.image_id))
            if pair in seen_pairs:
                stats.skipped["pair_already_used"] += 1
                continue
            candidates, areas = verdicts[query.image_id]
            picked = pair_questions(
                query, similar, candidates, class_names, embeddings[neighbour], clip, rng, settings, stats
            )
            if picked is None:
                continue
            positives, ranked = picked
            positives = quota.take("yes", positives)
            negatives = quota.take("no", [(similar, name) for name, _ in ranked])
            if any((image.file_name, name) in seen_questions for image, name in positives + negatives):
                stats.skipped["pair_repeats_a_question"] += 1  # as the public builder: the whole pair goes
                continue
            seen_pairs.add(pair)
            items += pair_items(settings.kind, query, similar, positives, negatives, areas, dict(ranked), similarity)
            for label, group in (("yes", positives), ("no", negatives)):
                seen_questions.update((image.file_name, name) for image, name in group)
                quota.add(label, len(group))
    quota.close(stats)
    for number, item in enumerate(items, start=1):
        item["id"] = number
    return items


def readable_images(
    images: list[ImageRecord], image_root: Path, clip: ClipScorer, stats: BuildStats
) -> tuple[list[ImageRecord], Any]:
    """The images whose file exists and decodes, with their CLIP embeddings; the others are counted as skipped."""
    present = []
    for record in images:
        if (image_root / record.file_name).is_file():
            present.append(record)
        else:
            stats.skipped["missing_image_file"] += 1
            stats.missing_images.append(record.file_name)
    embeddings, unreadable = clip.embed_images([image_root / r.file_name for r in present])
    if unreadable:
        bad = {str(path) for path in unreadable}
        stats.unreadable_images.extend(r.file_name for r in present if str(image_root / r.file_name) in bad)
        stats.skipped["unreadable_image_file"] += len(stats.unreadable_images)
        present = [r for r in present if str(image_root / r.file_name) not in bad]
    return present, embeddings


def query_positions(
    present: list[ImageRecord], image_root: Path, settings: BuildSettings, stats: BuildStats
) -> list[int]:
    """Positions in ``present`` of the query images I (at least ``min_classes`` classes); too few is an error."""
    queries = [position for position, record in enumerate(present) if len(record.boxes) >= settings.min_classes]
    stats.skipped[f"fewer_than_{settings.min_classes}_classes"] += len(present) - len(queries)
    if not queries or len(present) < 2:
        raise UserError(
            f"{image_root}: too few usable images ({len(queries)} with at least {settings.min_classes} classes, "
            f"{len(present)} readable in all; skipped: {dict(stats.skipped)})"
        )
    return queries


class Quota:
    """How many questions of each label are still wanted, with the progress bar that counts them."""

    def __init__(self, settings: BuildSettings) -> None:
        self.wanted = {"yes": settings.num_yes, "no": settings.num_no}
        self.counts = Counter[str]()
        self.progress = progress_bar(
            total=settings.num_yes + settings.num_no, desc=f"ORIC {settings.kind} questions", unit="q"
        )

    def done(self) -> bool:
        """Both counts reached."""
        return all(self.counts[label] >= self.wanted[label] for label in self.wanted)

    def take(self, label: str, group: list[tuple[ImageRecord, str]]) -> list[tuple[ImageRecord, str]]:
        """The head of ``group`` that still fits in the count of ``label``."""
        return group[: max(0, self.wanted[label] - self.counts[label])]

    def add(self, label: str, count: int) -> None:
        """Count ``count`` questions of ``label`` as built."""
        self.counts[label] += count
        self.progress.update(count)

    def close(self, stats: BuildStats) -> None:
        """Close the progress bar and record the shortfall of each label that was not reached."""
        self.progress.close()
        for label in self.wanted:
            if self.counts[label] < self.wanted[label]:
                stats.skipped[f"shortfall_{label}"] = self.wanted[label] - self.counts[label]


def pair_questions(
    query: ImageRecord,
    similar: ImageRecord,
    candidates: list[str],
    class_names: list[str],
    similar_embedding: Any,
    clip: ClipScorer,
    rng: random.Random,
    settings: BuildSettings,
    stats: BuildStats,
) -> tuple[list[tuple[ImageRecord, str]], list[tuple[str, float]]] | None:
    """A pair's positives (Alg. 1) and its CLIP-ranked negatives (Alg. 2), or None when it has too few (counted)."""
    if len(candidates) < settings.yes_per_image:
        stats.skipped["too_few_unpredictable_roi_objects"] += 1
        return None
    absent = [name for name in class_names if name not in similar.boxes]
    if len(absent) < settings.no_per_image:
        stats.skipped["too_few_absent_classes"] += 1
        return None
    # Alg. 1, line 12: k objects at random among those judged unpredictable.
    positives = [(query, name) for name in rng.sample(candidates, settings.yes_per_image)]
    # Alg. 2: the k absent classes CLIP finds most plausible in I' (stable sort: ties keep class order).
    scores = clip.clip_scores(similar_embedding, absent).tolist()
    ranked = sorted(zip(absent, scores), key=lambda named: -named[1])[: settings.no_per_image]
    return positives, ranked


def pair_items(
    kind: str,
    query: ImageRecord,
    similar: ImageRecord,
    positives: list[tuple[ImageRecord, str]],
    negatives: list[tuple[ImageRecord, str]],
    areas: dict[str, float],
    clip_of: dict[str, float],
    similarity: float,
) -> list[dict[str, Any]]:
    """A pair's questions in the official layout: its yes questions, then its no questions."""
    items = [
        oric_item(kind, image, similar, name, "yes", roi_area=areas[name], verdict="no", similarity=similarity)
        for image, name in positives
    ]
    items += [
        oric_item(kind, image, query, name, "no", clip_score=round(clip_of[name], 4), similarity=similarity)
        for image, name in negatives
    ]
    return items


def judge_roi_objects(
    records: list[ImageRecord], judge: Judge, stats: BuildStats
) -> dict[int, tuple[list[str], dict[str, float]]]:
    """ROI split (Alg. 1) of each image and one judge query per ROI object, asked with the non-ROI classes.

    Returns, per image id, the ROI objects judged unpredictable (answer "no") and the union area per class.
    """
    queries, owners, areas_of = [], [], {}
    for record in records:
        areas = describe(record)
        roi, non_roi = roi_split(areas)
        areas_of[record.image_id] = areas
        for name in roi:
            queries.append((non_roi, name, record.image_id))
            owners.append(record.image_id)
    answers = judge(queries) if queries else []
    result: dict[int, tuple[list[str], dict[str, float]]] = {r.image_id: ([], areas_of[r.image_id]) for r in records}
    stats.judge_answers.update(map(str, answers[: len(queries)]))
    if stats.judge_unreadable_example is None:
        stats.judge_unreadable_example = getattr(judge, "unreadable_example", None)
    for (_, name, _), owner, answer in zip(queries, owners, answers):
        if answer == "no":  # Alg. 1: the judge cannot infer it from context
            result[owner][0].append(name)
    return result


def oric_item(
    kind: str, image: ImageRecord, other: ImageRecord, name: str, label: str, **provenance: Any
) -> dict[str, Any]:
    """One question in the official layout (``kind`` "train": R1 prompt and ``<SOLUTION>`` answer; "bench": the
    four paraphrases and a bare yes/no), followed by the provenance fields. ``other`` is the pair's other image.
    """
    if kind == "train":
        problem: str | tuple[str, ...] = r1_prompt(name)
        solution = f"<SOLUTION>{label}</SOLUTION>"
    else:
        problem, solution = shared_paraphrases(name), label
    roi_area = provenance.get("roi_area")
    return {
        "id": 0,
        "image": image.file_name,
        "target_object": name,
        "problem": problem,
        "solution": solution,
        "label": label,
        "source_image_id": image.image_id,
        "similar_image_id": other.image_id,
        "roi_area": round(roi_area, 2) if roi_area is not None else None,
        "object_size": size_tier(roi_area) if roi_area is not None else None,
        "judge_verdict": provenance.get("verdict"),
        "clip_score": provenance.get("clip_score"),
        "image_similarity": round(provenance["similarity"], 6),
    }


MANIFEST_PACKAGES = ("torch", "transformers", "pycocotools", "numpy", "pillow")  # the packages that shape the output


def write_outputs(
    items: list[dict[str, Any]],
    out: Path,
    *,
    annotations: Path,
    image_root: Path,
    settings: BuildSettings,
    stats: BuildStats,
    judge: Judge,
    clip_model: str,
    build: dict[str, Any] | None = None,
) -> Path:
    """Write the questions file and ``<out stem>.manifest.json`` beside it, both atomically; ``build`` is
    the build's identity (:func:`core.io.build_identity`), recorded so a rerun knows its own output."""
    atomic_write_json(out, items, indent=4, hashed=True)  # its sha256 for the manifest, without reading it back
    counts = Counter(map(operator.itemgetter("label"), items))
    manifest = {
        "output": out.name,
        "output_sha256": sha256_file(out),
        "kind": settings.kind,
        "annotations": str(annotations),
        "annotations_sha256": sha256_file(annotations),
        "image_root": str(Path(image_root).resolve()),  # where `eval run` finds the images (eval_hooks.evaluate)
        "judge": judge.describe(),
        "clip_model": clip_model,
        "clip_text_template": TEXT_TEMPLATE,
        "settings": vars(settings),
        "counts": {
            "questions": len(items),
            "yes": counts["yes"],
            "no": counts["no"],
            "images": len(set(map(operator.itemgetter("image"), items))),
        },
        "skipped": dict(stats.skipped),
        "missing_images": stats.missing_images,
        "unreadable_images": stats.unreadable_images,
        "judge_answers": dict(stats.judge_answers),
        "versions": package_versions(MANIFEST_PACKAGES),
        "build": build,
    }
    atomic_write_json(manifest_path(out), manifest)
    return out


def build_oric_file(
    annotations: Path,
    image_root: Path,
    out: Path,
    settings: BuildSettings,
    *,
    judge_factory: Callable[[list[ImageRecord]], Judge],
    clip_model: str,
    clip_cache: Path | None,
    batch_size: int = 64,
    exclude_images: set[str] | None = None,
    build: dict[str, Any] | None = None,
    instances: tuple[list[ImageRecord], list[str]] | None = None,
) -> tuple[Path, BuildStats]:
    """Build one ORIC file end to end (the ``veritune build oric`` / ``oric-bench`` commands); ``instances``:
    ``annotations`` already loaded by :func:`load_instances` (the CLI checks them before claiming ``out``).

    Raises:
        UserError: nothing usable was built (no question of a label that was asked for), with the reason.
    """
    try:
        images, class_names = instances or load_instances(annotations)
        stats = BuildStats()
        if exclude_images:
            kept = [record for record in images if record.file_name not in exclude_images]
            stats.skipped["excluded_image"] = len(images) - len(kept)
            images = kept
        judge = judge_factory(images)
        clip = ClipScorer(clip_model, cache_dir=clip_cache, batch_size=batch_size)
        items = build_items(images, image_root, class_names, judge, clip, settings, stats)
        check_usable(items, settings, stats)
        return write_outputs(
            items,
            out,
            annotations=annotations,
            image_root=image_root,
            settings=settings,
            stats=stats,
            judge=judge,
            clip_model=clip_model,
            build=build,
        ), stats
    finally:
        # load_instances froze the annotations (and whatever else was alive) out of the collector's walks for
        # the build; after it, the collector sees everything again, so nothing frozen outlives the build
        gc.unfreeze()


def check_usable(items: list[dict[str, Any]], settings: BuildSettings, stats: BuildStats) -> None:
    """Refuse to write a file with no question of a label that was asked for (e.g. a judge that found every
    object predictable leaves no "yes" question), naming why the candidates were skipped."""
    counts = Counter(item["label"] for item in items)
    empty = [
        label
        for label, wanted in (("yes", settings.num_yes), ("no", settings.num_no))
        if wanted > 0 and not counts[label]
    ]
    if not empty:
        return
    skipped = {key: value for key, value in stats.skipped.items() if not key.startswith("shortfall_")}
    judge = f"; judge answers {dict(stats.judge_answers)}" if stats.judge_answers else ""
    hint = _judge_hint(stats)
    what = "no question" if len(empty) == 2 else f"no '{empty[0]}' question"
    raise UserError(f"nothing usable was built: {what}{hint}; skipped {skipped}{judge}; nothing was written")


def _judge_hint(stats: BuildStats) -> str:
    """Why the judge left nothing: no answer could be read (with one example), or every object predictable."""
    answers = stats.judge_answers
    if not answers or answers.get("no"):
        return ""
    if not answers.get("yes"):
        example = stats.judge_unreadable_example
        shown = f"; e.g. {example[:200]!r}" if example is not None else ""
        return f" (no judge answer could be read: none of its {sum(answers.values())} answers held a yes or no{shown})"
    return " (the judge found every object predictable from its context)"


def oric_file_images(path: Path) -> set[str]:
    """The image files an ORIC file (official layout) asks about."""
    data = read_json(path, what="ORIC file")
    if not isinstance(data, list) or not all(isinstance(item, dict) and "image" in item for item in data):
        raise UserError(f"{path}: expected an ORIC file (a JSON list of records with an 'image' field)")
    return {item["image"] for item in data}


def leaked_images(first: Path, second: Path) -> list[str]:
    """Image files that appear in both ORIC files (a training set must not share images with the bench)."""
    return sorted(oric_file_images(first) & oric_file_images(second))
