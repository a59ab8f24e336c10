"""FINER-Tuning preference datasets (FINER, arXiv 2603.17662, Sec. 3, App. C): tuples from scene
graphs (offline) or from long captions (LLM), written in TRL's conversational preference format.

Output directory::

    train.jsonl        rows {images, prompt, chosen, rejected, subset, polarity, template_id, source_image, source_id}
    validation.jsonl   0.5% of the rows (App. C: "We reserve 0.5% of the data as a validation set")
    manifest.json      input sha256, image_root, seed, counts, everything skipped and why, versions
    missing_images.txt images named by the input but absent under the image root (only when there are some)

``images`` holds paths relative to ``manifest.json``'s ``image_root``. The rows are a uniform, seeded
subsample of at most ``max_tuples`` tuples (App. C: "uniformly subsample at most 160K tuples"), drawn by
reservoir sampling so that memory stays bounded however many tuples are built.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json, atomic_write_text, package_versions, sha256_file
from core.progress import progress_bar
from data_builders.finer.filtering import DEFAULT_THRESHOLDS, filter_negatives
from data_builders.finer.llm import DEFAULT_ATTEMPTS, Caption, LLMStats, read_captions, tuples_from_captions
from data_builders.finer.scene_graph import SceneGraph, load_scene_graphs, tuples_for_image
from data_builders.finer.templates import PreferenceTuple

VALIDATION_RATIO = 0.005  # FINER App. C / Table 10: "Val. ratio 0.005"
DEFAULT_MAX_TUPLES = 160_000  # FINER App. C: at most 160K tuples
MANIFEST_FORMAT = "veritune-finer"
CAPTION_CHUNK = 1024  # captions whose requests are sent together (bounded memory, steady progress)
MAX_LISTED_MISSING = 1000


MANIFEST_PACKAGES = ("transformers", "trl", "datasets", "torch")  # the packages that shape the output


def preference_row(image: str, item: PreferenceTuple, source_id: str) -> dict[str, Any]:
    """One row in TRL's conversational preference format; the image placeholder sits in the user turn."""
    return {
        "images": [image],
        "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": item.question}]}],
        "chosen": [{"role": "assistant", "content": [{"type": "text", "text": item.chosen}]}],
        "rejected": [{"role": "assistant", "content": [{"type": "text", "text": item.rejected}]}],
        "subset": item.subset,
        "polarity": item.polarity,
        "template_id": item.template_id,
        "source_image": image,
        "source_id": source_id,
    }


class Reservoir:
    """A uniform random sample of at most ``capacity`` items from a stream (Algorithm R), seeded."""

    def __init__(self, capacity: int, rng: random.Random) -> None:
        self.capacity, self.rng = capacity, rng
        self.items: list[dict[str, Any]] = []
        self.seen = 0
        self.built: Counter[str] = Counter()

    def add(self, row: dict[str, Any]) -> None:
        self.seen += 1
        self.built[row["subset"]] += 1
        if len(self.items) < self.capacity:
            self.items.append(row)
        else:
            slot = self.rng.randrange(self.seen)
            if slot < self.capacity:
                self.items[slot] = row


def _add_tuples(
    reservoir: Reservoir, image: str, source_id: str, tuples: list[PreferenceTuple], skipped: Counter[str]
) -> int:
    added = 0
    for item in tuples:
        if item.chosen.strip() == item.rejected.strip():
            skipped["chosen_equals_rejected"] += 1
            continue
        reservoir.add(preference_row(image, item, source_id))
        added += 1
    return added


def write_preference_dataset(
    reservoir: Reservoir,
    out_dir: Path,
    *,
    validation_ratio: float,
    rng: random.Random,
    manifest: dict[str, Any],
    skipped: Counter[str],
    missing_images: list[str],
) -> dict[str, Any]:
    """Shuffle, split off the validation rows, write both JSONL files, the missing-image list and the manifest."""
    rows = list(reservoir.items)
    if not rows:
        raise UserError(f"{manifest['input']['path']}: no preference tuple could be built (skipped: {dict(skipped)})")
    rng.shuffle(rows)
    n_val = max(1, round(len(rows) * validation_ratio)) if validation_ratio > 0 and len(rows) >= 2 else 0
    validation, train = rows[:n_val], rows[n_val:]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.jsonl", train), ("validation.jsonl", validation)):
        atomic_write_text(out_dir / name, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in part))
    if missing_images:
        atomic_write_text(out_dir / "missing_images.txt", "".join(f"{name}\n" for name in missing_images))
    manifest.update(
        {
            "counts": {
                "tuples_built": reservoir.seen,
                "built_by_subset": dict(sorted(reservoir.built.items())),
                "written": len(rows),
                "train": len(train),
                "validation": len(validation),
                "by_subset": dict(sorted(Counter(r["subset"] for r in rows).items())),
                "by_polarity": dict(sorted(Counter(r["polarity"] for r in rows).items())),
            },
            "skipped": dict(sorted(skipped.items())),
            "missing_images": missing_images[:MAX_LISTED_MISSING],
            "versions": package_versions(MANIFEST_PACKAGES),
        }
    )
    atomic_write_json(out_dir / "manifest.json", manifest)
    return manifest


def _base_manifest(
    kind: str, source: Path, image_root: Path, *, seed: int, max_tuples: int, validation_ratio: float
) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "input": {"kind": kind, "path": str(source), "sha256": sha256_file(source)},
        "image_root": str(image_root.resolve()),
        "seed": seed,
        "max_tuples": max_tuples,
        "validation_ratio": validation_ratio,
    }


def check_settings(image_root: Path, max_tuples: int, validation_ratio: float) -> None:
    """The FINER-Tuning build's settings, checked before anything is read or written (one line naming the flag)."""
    if not image_root.is_dir():
        raise UserError(f"--image-root {image_root}: not a directory")
    if max_tuples < 1:
        raise UserError(f"--max-tuples {max_tuples}: must be at least 1")
    if not 0 <= validation_ratio < 0.5:
        raise UserError(f"--validation-ratio {validation_ratio}: must be in [0, 0.5)")


def split_missing(
    graphs: list[SceneGraph], image_root: Path, skipped: Counter[str]
) -> tuple[list[SceneGraph], list[str]]:
    present, missing = [], []
    for graph in graphs:
        if (image_root / graph.image).is_file():
            present.append(graph)
        else:
            skipped["missing_image"] += 1
            missing.append(graph.image)
    return present, missing


def build_finer_from_scene_graphs(
    scene_graphs: Path,
    image_root: Path,
    out_dir: Path,
    *,
    max_tuples: int = DEFAULT_MAX_TUPLES,
    seed: int = 0,
    validation_ratio: float = VALIDATION_RATIO,
    discriminator: Any = None,
    thresholds: dict[str, float] | None = None,
    client: Any = None,
    attempts: int = DEFAULT_ATTEMPTS,
    filter_rounds: int = 3,
) -> dict[str, Any]:
    """The offline path: FINER-Tuning tuples from scene graphs; returns the manifest.

    With a ``discriminator`` the negatives are filtered first (App. B.3; regenerated with ``client`` when
    given, dropped otherwise); the filtered scene graphs are kept as ``scene_graphs.filtered.json``.
    """
    check_settings(image_root, max_tuples, validation_ratio)
    graphs = load_scene_graphs(scene_graphs)
    manifest = _base_manifest(
        "scene-graphs", scene_graphs, image_root, seed=seed, max_tuples=max_tuples, validation_ratio=validation_ratio
    )
    skipped: Counter[str] = Counter()
    graphs, missing = split_missing(graphs, image_root, skipped)
    manifest["filter"] = None
    if discriminator is not None:
        stats = filter_negatives(
            graphs,
            image_root,
            discriminator,
            thresholds=thresholds,
            client=client,
            attempts=attempts,
            rounds=filter_rounds,
            seed=seed,
            log_path=out_dir / "filter_log.jsonl",
        )
        atomic_write_json(out_dir / "scene_graphs.filtered.json", [g.to_json() for g in graphs], indent=None)
        manifest["filter"] = {
            "model": discriminator.name,
            "thresholds": {**DEFAULT_THRESHOLDS, **(thresholds or {})},
            "rounds": filter_rounds,
            "regenerate_with_llm": client is not None,
            "levels": stats.summary(),
        }
    rng = random.Random(seed)
    reservoir = Reservoir(max_tuples, rng)
    for graph in progress_bar(graphs, desc="FINER tuples", unit="image", disable=len(graphs) < 500):
        tuples = tuples_for_image(graph, random.Random(f"{seed}\0{graph.example_id}\0{graph.image}"), skipped)
        if not _add_tuples(reservoir, graph.image, graph.example_id, tuples, skipped):
            skipped["image_without_usable_units"] += 1
    manifest["images"] = {"records": len(graphs) + len(missing), "used": len(graphs)}
    return write_preference_dataset(
        reservoir,
        out_dir,
        validation_ratio=validation_ratio,
        rng=rng,
        manifest=manifest,
        skipped=skipped,
        missing_images=missing,
    )


def build_finer_from_captions(
    captions: Path,
    image_root: Path,
    out_dir: Path,
    client: Any,
    *,
    max_tuples: int = DEFAULT_MAX_TUPLES,
    seed: int = 0,
    validation_ratio: float = VALIDATION_RATIO,
    attempts: int = DEFAULT_ATTEMPTS,
    chunk_size: int = CAPTION_CHUNK,
) -> dict[str, Any]:
    """The LLM path: FINER-Tuning tuples from ``{image, caption}`` JSON lines; returns the manifest.

    The file is checked in full before any request is sent (a bad line is an error naming it). Answers are
    cached by ``client``, so an interrupted build resumes and a finished one reruns without requests.
    """
    check_settings(image_root, max_tuples, validation_ratio)
    if attempts < 1:
        raise UserError(f"--llm-attempts {attempts}: must be at least 1")
    total = sum(1 for _ in read_captions(captions))
    manifest = _base_manifest(
        "captions", captions, image_root, seed=seed, max_tuples=max_tuples, validation_ratio=validation_ratio
    )
    skipped: Counter[str] = Counter()
    stats = LLMStats(skipped=skipped)
    missing: list[str] = []
    rng = random.Random(seed)
    reservoir = Reservoir(max_tuples, rng)
    used = tuples_from_caption_file(
        captions,
        image_root,
        client,
        reservoir,
        total=total,
        seed=seed,
        attempts=attempts,
        chunk_size=chunk_size,
        stats=stats,
        missing=missing,
    )
    manifest["images"] = {"records": total, "used": used}
    manifest["llm"] = _llm_manifest(client, attempts, stats)
    return write_preference_dataset(
        reservoir,
        out_dir,
        validation_ratio=validation_ratio,
        rng=rng,
        manifest=manifest,
        skipped=skipped,
        missing_images=missing,
    )


def tuples_from_caption_file(
    captions: Path,
    image_root: Path,
    client: Any,
    reservoir: Reservoir,
    *,
    total: int,
    seed: int,
    attempts: int,
    chunk_size: int,
    stats: LLMStats,
    missing: list[str],
) -> int:
    """Send the usable captions to the LLM path in chunks and add their tuples to ``reservoir``; returns how
    many captions were used (empty captions and missing images are counted in ``stats`` and ``missing``)."""
    skipped = stats.skipped
    used = 0

    def run(chunk: list[Caption]) -> None:
        for caption, tuples in tuples_from_captions(chunk, client, seed=seed, attempts=attempts, stats=stats):
            if not _add_tuples(reservoir, caption.image, f"line {caption.line}", tuples, skipped):
                skipped["caption_without_usable_object"] += 1

    pending: list[Caption] = []
    lines = 0
    with progress_bar(total=total, desc="FINER captions", unit="caption") as progress:
        for caption in read_captions(captions):
            lines += 1
            if not caption.caption:
                skipped["empty_caption"] += 1
            elif not (image_root / caption.image).is_file():
                skipped["missing_image"] += 1
                missing.append(caption.image)
            else:
                pending.append(caption)
                used += 1
            if len(pending) >= chunk_size:
                run(pending)
                progress.update(lines)
                pending, lines = [], 0
        if pending:
            run(pending)
        progress.update(lines)
    return used


def _llm_manifest(client: Any, attempts: int, stats: LLMStats) -> dict[str, Any]:
    """The manifest's record of the LLM: endpoint, model, sampling, attempts, requests and rejected answers."""
    return {
        "base_url": client.endpoint,
        "model": client.model,
        "temperature": client.temperature,
        "max_tokens": client.max_tokens,
        "attempts": attempts,
        "requests_sent": client.requests_sent,
        "cache_hits": client.cache_hits,
        "rejected_answers": dict(sorted(stats.rejected_answers.items())),
    }
