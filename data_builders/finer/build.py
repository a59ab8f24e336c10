"""``veritune build finer``: FINER-Tuning preference tuples written in TRL's conversational preference
format (``images``, ``prompt``, ``chosen``, ``rejected`` plus ``subset``, ``polarity``, ``template_id``),
subsampled to at most N tuples with a 0.5% validation split (FINER App. C), and a manifest.

Output directory: ``train.jsonl``, ``validation.jsonl``, ``manifest.json``. Image paths are relative to
the image root recorded in the manifest.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_builders.finer.scene_graph import load_scene_graphs, tuples_for_image
from data_builders.oric.build import package_versions
from veritune.errors import UserError
from veritune.io import atomic_write_json, atomic_write_text, sha256_file

VALIDATION_RATIO = 0.005  # FINER App. C: 0.5% of the data held out


def tuple_row(image: str, item: Any) -> dict[str, Any]:
    return {
        "images": [image],
        "prompt": [{"role": "user", "content": item.question}],
        "chosen": [{"role": "assistant", "content": item.chosen}],
        "rejected": [{"role": "assistant", "content": item.rejected}],
        "subset": item.subset,
        "polarity": item.polarity,
        "template_id": item.template_id,
    }


def build_finer_from_scene_graphs(
    scene_graphs: Path, image_root: Path, out_dir: Path, *, max_tuples: int = 160_000, seed: int = 0
) -> dict[str, Any]:
    """Build the FINER-Tuning dataset directory from scene graphs; returns the manifest."""
    records = load_scene_graphs(scene_graphs)
    rng = random.Random(seed)
    skipped: Counter[str] = Counter()
    missing: list[str] = []
    rows = []
    for record in tqdm(records, desc="FINER tuples", unit="image", disable=len(records) < 500):
        if not (image_root / record["image"]).is_file():
            skipped["missing_image"] += 1
            missing.append(record["image"])
            continue
        tuples = tuples_for_image(record, rng, skipped)
        if not tuples:
            skipped["image_without_usable_units"] += 1
        for item in tuples:
            if item.chosen == item.rejected:
                skipped["chosen_equals_rejected"] += 1
                continue
            rows.append(tuple_row(record["image"], item))
    if not rows:
        raise UserError(f"{scene_graphs}: no preference tuples could be built (skipped: {dict(skipped)})")
    rng.shuffle(rows)
    total_built = len(rows)
    rows = rows[:max_tuples]
    n_val = max(1, round(len(rows) * VALIDATION_RATIO)) if len(rows) >= 2 else 0
    validation, train = rows[:n_val], rows[n_val:]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.jsonl", train), ("validation.jsonl", validation)):
        atomic_write_text(out_dir / name, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part))
    manifest = {
        "format": "veritune-finer",
        "source": str(scene_graphs),
        "source_sha256": sha256_file(scene_graphs),
        "path": "scene-graph",
        "image_root": str(image_root.resolve()),
        "seed": seed,
        "max_tuples": max_tuples,
        "counts": {"built": total_built, "train": len(train), "validation": len(validation),
                   "by_subset": dict(Counter(r["subset"] for r in rows)), "by_polarity": dict(Counter(r["polarity"] for r in rows))},  # fmt: skip
        "skipped": dict(skipped),
        "missing_images": missing[:100],
        "versions": package_versions(),
    }
    atomic_write_json(out_dir / "manifest.json", manifest)
    return manifest


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build finer``."""
    parser = subparsers.add_parser("finer", help="FINER-Tuning DPO preference tuples")
    parser.add_argument("--scene-graphs", type=Path, required=True, help="scene graphs (JSON or JSONL, see the module doc)")
    parser.add_argument("--image-root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--max-tuples", type=int, default=160_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    manifest = build_finer_from_scene_graphs(args.scene_graphs, args.image_root, args.out, max_tuples=args.max_tuples, seed=args.seed)
    print(f"wrote {args.out}: {json.dumps(manifest['counts'])}; skipped {json.dumps(manifest['skipped'])}")
    return 0
