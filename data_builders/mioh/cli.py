"""``veritune build mioh-rft``: MIOH-format multi-image questions, training data and a bench in one build
("Fine-Grained Multi-Image Object Hallucination Benchmark", Sec. 3 and App. A.3-A.4)."""

from __future__ import annotations

import argparse
import json
import operator
import sys
from collections import Counter
from pathlib import Path

from core.cli_help import command_help
from core.errors import UserError
from core.io import (
    atomic_write_json,
    build_identity,
    check_output_path,
    claim_output_dir,
    package_versions,
    sha256_file,
)
from data_builders.finer.scene_graph import load_scene_graphs
from data_builders.mioh.build import (
    BALANCE_TOLERANCE,
    MANIFEST_PACKAGES,
    MAX_COUNT,
    OUTPUT_FILE,
    PRESSURES,
    MiohSettings,
    answer_balance,
    build_images,
    build_mioh,
)
from data_builders.mioh.templates import TASKS
from data_builders.oric.annotations import load_instances
from data_builders.oric.clip_negatives import TEXT_TEMPLATE

MANIFEST = "manifest.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build mioh-rft``."""
    parser = subparsers.add_parser("mioh-rft", help=command_help("build", "mioh-rft"))
    parser.add_argument("--annotations", type=Path, required=True, help="COCO-format instances JSON")
    parser.add_argument("--image-root", type=Path, required=True, help="directory the image paths are relative to")
    parser.add_argument("--scene-graphs", type=Path, help="FINER-layout scene graphs (the attribute task needs them)")
    parser.add_argument("--out", type=Path, required=True, help="output directory (mioh.json, manifest.json)")
    parser.add_argument("--questions", type=int, default=4, help="questions per template, pressure and set size")
    parser.add_argument("--num-images", default="2,4", help="comma-separated set sizes (the smallest: easy and hard)")
    parser.add_argument("--tasks", help=f"comma-separated subset of {','.join(TASKS)} (default: all)")
    parser.add_argument("--pressures", help=f"comma-separated subset of {','.join(PRESSURES)}")
    parser.add_argument("--max-count", type=int, default=MAX_COUNT, help="counting: most instances of a class")
    parser.add_argument("--clip-model", help="CLIP hub id or directory for the CLIP pressures (none: skipped)")
    parser.add_argument("--clip-cache", type=Path, default=Path("outputs/cache/clip"), help="image embedding cache")
    parser.add_argument("--batch-size", type=int, default=64, help="CLIP embedding batch size")
    parser.add_argument("--exclude-images-from", type=Path, help="never use images of this MIOH build or ORIC file")
    parser.add_argument("--seed", type=int, default=42, help="random seed (same seed and flags, same file)")
    parser.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    parser.set_defaults(handler=_build)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise UserError(f"--num-images: expected comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 2:
        raise UserError(f"--num-images: every set size must be at least 2 (got {text!r})")
    if sizes[-1] > 25:
        raise UserError(f"--num-images: at most 25 images a question (got {sizes[-1]})")
    return sizes


def _tasks(text: str | None, scene_graphs: Path | None) -> tuple[str, ...]:
    if text is None:
        return tuple(t for t in TASKS if t != "attribute" or scene_graphs is not None)
    tasks = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise UserError(f"--tasks: unknown task {unknown[0] if unknown else text!r}; known: {', '.join(TASKS)}")
    if "attribute" in tasks and scene_graphs is None:
        raise UserError("--tasks attribute needs --scene-graphs (FINER-layout scene graphs with attributes)")
    return tasks


def _pressures(text: str | None) -> tuple[str, ...]:
    if text is None:
        return PRESSURES
    pressures = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [p for p in pressures if p not in PRESSURES]
    if unknown or not pressures:
        raise UserError(
            f"--pressures: unknown pressure {unknown[0] if unknown else text!r}; known: {', '.join(PRESSURES)}"
        )
    return tuple(p for p in PRESSURES if p in pressures)


def _build(args: argparse.Namespace) -> int:
    for flag, value, least in (("--questions", args.questions, 1), ("--max-count", args.max_count, 1)):
        if value < least:
            raise UserError(f"{flag} must be at least {least} (got {value})")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    sizes = _sizes(args.num_images)
    tasks = _tasks(args.tasks, args.scene_graphs)
    check_output_path(args.out, directory=True)
    if not args.image_root.is_dir():
        raise UserError(f"--image-root: not a directory: {args.image_root}")
    instances = load_instances(args.annotations)
    graphs = load_scene_graphs(args.scene_graphs) if args.scene_graphs else []
    exclude = build_images(args.exclude_images_from) if args.exclude_images_from else None
    settings = MiohSettings(args.questions, sizes, tasks, args.max_count, args.seed, _pressures(args.pressures))
    chosen = dict(vars(settings))
    if settings.pressures == PRESSURES:  # a build of every pressure keeps the identity it had before the flag
        chosen.pop("pressures")
    identity = build_identity(
        "build mioh-rft",
        {**chosen, "clip_model": args.clip_model},
        {
            "annotations": args.annotations,
            "scene_graphs": args.scene_graphs,
            "image_root": args.image_root,
            "exclude_images_from": args.exclude_images_from,
        },
    )
    staged = claim_output_dir(args.out, identity, force=args.force)
    if staged.resuming and (args.out / OUTPUT_FILE).is_file():
        staged.discard()
        print(f"{args.out} already holds this build; nothing to do")
        return 0
    with staged:
        clip = None
        if args.clip_model:
            from data_builders.oric.clip_negatives import ClipScorer

            clip = ClipScorer(args.clip_model, cache_dir=args.clip_cache, batch_size=args.batch_size)
        records, stats, present = build_mioh(
            instances, graphs, args.image_root, settings, clip=clip, exclude_images=exclude
        )
        out = staged.path / OUTPUT_FILE
        atomic_write_json(out, records, indent=2)
        balance = answer_balance(records)
        used = {image for record in records for image in record["images"]}
        counts = {
            key: dict(sorted(Counter(map(operator.itemgetter(key), records)).items()))
            for key in ("task", "pattern", "pressure", "num_images")
        }
        manifest = {
            "output": OUTPUT_FILE,
            "output_sha256": sha256_file(out),
            "benchmark": "MIOH, 'Fine-Grained Multi-Image Object Hallucination Benchmark' (Table 1 templates)",
            "annotations": str(args.annotations),
            "annotations_sha256": sha256_file(args.annotations),
            "scene_graphs": str(args.scene_graphs) if args.scene_graphs else None,
            "image_root": str(args.image_root.resolve()),
            "settings": {**vars(settings), "balance_tolerance": BALANCE_TOLERANCE},
            "clip": {"model": args.clip_model, "text_template": TEXT_TEMPLATE}
            if clip is not None
            else {"model": None, "note": "no --clip-model: the CLIP pressures were skipped"},
            "counts": {"questions": len(records), "images": len(used), **counts},
            "answer_balance": balance,
            "shortfall": stats.shortfall,
            "skipped": dict(stats.skipped),
            "missing_images": stats.missing_images,
            "unreadable_images": stats.unreadable_images,
            "leakage": {
                "against": str(args.exclude_images_from) if args.exclude_images_from else None,
                "excluded_images": len(exclude or ()),
                "shared_images": len(used & (exclude or set())),
            },
            "versions": package_versions(MANIFEST_PACKAGES),
            "build": identity,
        }
        atomic_write_json(staged.path / MANIFEST, manifest)
    print(
        f"wrote {args.out / OUTPUT_FILE} and {args.out / MANIFEST}: {len(records)} questions on {len(used)} images; "
        f"by task {json.dumps(counts['task'])}"
    )
    if stats.shortfall:
        print(f"warning: cells short of --questions (see 'shortfall'): {json.dumps(stats.shortfall)}", file=sys.stderr)
    if not balance["balanced"]:
        print("warning: answer letters are not balanced (see 'answer_balance' in the manifest)", file=sys.stderr)
    if stats.missing_images:
        print(f"missing image files ({len(stats.missing_images)}, listed in the manifest)", file=sys.stderr)
    return 0
