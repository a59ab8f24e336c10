"""``veritune build synthetic-world``, ``veritune build scene-graphs`` and ``veritune build warmstart-data``: offline
demo data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.cli_help import command_help


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build synthetic-world``, ``veritune build scene-graphs`` and ``veritune build warmstart-data``."""
    world = subparsers.add_parser(
        "synthetic-world",
        help=command_help("build", "synthetic-world"),
        description="Draw a seeded world of simple shapes with COCO-format annotations "
        "(train and val images and instances JSON): the offline stand-in for COCO-2014.",
    )
    world.add_argument(
        "--out",
        type=Path,
        required=True,
        help="output directory (train/ and val/, each with images/ and instances.json)",
    )
    world.add_argument("--train-images", type=int, default=400, help="images in the train split")
    world.add_argument("--val-images", type=int, default=120, help="images in the val split")
    world.add_argument(
        "--dev-images",
        type=int,
        default=0,
        help="images in a third split, dev, held out from training and benchmarks for selecting hyperparameters",
    )
    world.add_argument("--image-size", type=int, default=64, help="image side in pixels")
    world.add_argument("--seed", type=int, default=0, help="random seed (same seed, same world)")
    world.add_argument(
        "--backgrounds",
        choices=["shared", "scene"],
        default="shared",
        help="shared: one grey for every scene (the scene is told by its objects); scene: a colour per scene",
    )
    world.add_argument(
        "--in-context-rate", type=float, default=0.6, help="probability of each of a scene's typical classes"
    )
    world.add_argument(
        "--out-of-context-rate", type=float, default=0.7, help="probability of an object of another scene"
    )
    world.add_argument(
        "--instance-attributes",
        choices=["none", "drawn"],
        default="none",
        help="none: a light or dark shade per instance; drawn: also a border and a pattern (docs/DATA_FORMATS.md)",
    )
    world.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    world.set_defaults(handler=_synthetic_world)

    graphs = subparsers.add_parser("scene-graphs", help=command_help("build", "scene-graphs"))
    graphs.add_argument("--annotations", type=Path, required=True, help="the synthetic world's COCO annotations")
    graphs.add_argument(
        "--out", type=Path, required=True, help="output JSON (a <name>.manifest.json is written beside it)"
    )
    graphs.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    graphs.set_defaults(handler=_scene_graphs)

    data = subparsers.add_parser(
        "warmstart-data",
        help=command_help("build", "warmstart-data"),
        description="The SFT warm-start's table (JSON lines of prompt, completion, images; finetune/sft.py's "
        "dataset_path) from a COCO instances file: POPE-random-style yes/no questions, captions and lettered "
        "questions about each image's classes, and FINER-worded attribute pairs from the split's scene graphs "
        "(miniature/warmstart_data.py). Images are named relative to --image-root: give the run that folder as "
        "image_root.",
    )
    data.add_argument("--annotations", type=Path, required=True, help="the train split's COCO instances file")
    data.add_argument("--image-root", type=Path, required=True, help="the folder holding its images")
    data.add_argument(
        "--out", type=Path, required=True, help="output table, .jsonl (a <name>.manifest.json is written beside it)"
    )
    data.add_argument(
        "--questions-per-image", type=int, default=2, help="yes/no questions per image and label (yes and no each)"
    )
    data.add_argument(
        "--captions",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one caption per image listing its classes",
    )
    data.add_argument(
        "--mcq-per-image",
        type=int,
        default=0,
        help="lettered questions per image: which of five classes is in the image (one present, four absent)",
    )
    data.add_argument(
        "--answer-styles",
        nargs="+",
        choices=["plain", "r1"],
        default=["plain", "r1"],
        help="plain (Yes. / No.) and/or r1 (ORIC Fig. 11's tags), each question once per style",
    )
    data.add_argument(
        "--attribute-pairs-per-image",
        type=int,
        default=0,
        help="FINER yes/no probe pairs per image and attribute slot (0: none)",
    )
    data.add_argument(
        "--attribute-pair-slots",
        type=int,
        nargs="+",
        help="the attribute slots asked about, 0-based (a drawn world: 0 shade, 1 border, 2 pattern); default: all",
    )
    data.add_argument(
        "--scene-graphs",
        type=Path,
        help="with --attribute-pairs-per-image: the split's scene graphs (default: beside --annotations)",
    )
    data.add_argument(
        "--multi-image", type=Path, help="a MIOH-format file (images under --image-root): its questions join the table"
    )
    data.add_argument("--seed", type=int, default=0, help="random seed (same seed and flags, same rows in same order)")
    data.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    data.set_defaults(handler=_warmstart_data)


def _synthetic_world(args: argparse.Namespace) -> int:
    from core.io import build_identity, check_output_path, claim_output_dir
    from miniature.world import build_synthetic_world, check_world_settings

    check_output_path(args.out, directory=True)
    settings = {
        "num_train_images": args.train_images,
        "num_val_images": args.val_images,
        "num_dev_images": args.dev_images,
        "image_size": args.image_size,
        "backgrounds": args.backgrounds,
        "in_context_rate": args.in_context_rate,
        "out_of_context_rate": args.out_of_context_rate,
        "instance_attributes": args.instance_attributes,
    }
    check_world_settings(**settings)  # the flags first, then the output policy, then the drawing
    identity = build_identity("build synthetic-world", {**settings, "seed": args.seed}, {})
    if args.instance_attributes == "none":  # a default world keeps the identity it had before the flag existed
        identity["settings"].pop("instance_attributes")
    with claim_output_dir(args.out, identity, force=args.force) as staged:
        paths = build_synthetic_world(staged.path, seed=args.seed, **settings)
    print(json.dumps({key: str(staged.published(value)) for key, value in paths.items()}, indent=2))
    return 0


def _scene_graphs(args: argparse.Namespace) -> int:
    from core.io import build_identity, check_output_path, claim_output_file
    from data_builders.oric.annotations import load_instances
    from miniature.scene_graphs import scene_graphs_from_coco

    check_output_path(args.out)
    load_instances(args.annotations)  # the input in full (boxes, categories) before the output policy
    identity = build_identity("build scene-graphs", {}, {"annotations": args.annotations})
    with claim_output_file(args.out, identity, force=args.force) as staged:
        scene_graphs_from_coco(args.annotations, staged.path)
    print(f"wrote {args.out}")
    return 0


def _warmstart_data(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from core.errors import UserError
    from core.io import build_identity, check_output_path, claim_output_file, manifest_path
    from miniature.warmstart_data import (
        WarmstartSettings,
        default_scene_graphs,
        load_present_classes,
        write_warmstart_table,
    )

    check_output_path(args.out)
    if args.out.suffix != ".jsonl":
        raise UserError(f"--out {args.out}: expected a .jsonl file (the JSON lines finetune/sft.py reads)")
    settings = WarmstartSettings(
        questions_per_image=args.questions_per_image,
        captions=args.captions,
        mcq_per_image=args.mcq_per_image,
        answer_styles=tuple(args.answer_styles),
        attribute_pairs_per_image=args.attribute_pairs_per_image,
        attribute_pair_slots=None if args.attribute_pair_slots is None else tuple(args.attribute_pair_slots),
        multi_image=None if args.multi_image is None else str(args.multi_image),
        seed=args.seed,
    )
    settings.check()  # the flags first, then the inputs, then the output policy, then the build
    if not settings.attribute_pairs_per_image and (args.scene_graphs or args.attribute_pair_slots):
        raise UserError("--scene-graphs and --attribute-pair-slots: only with --attribute-pairs-per-image")
    if not args.image_root.is_dir():
        raise UserError(f"--image-root {args.image_root}: not a directory")
    if args.multi_image is not None and not args.multi_image.is_file():
        raise UserError(f"--multi-image {args.multi_image}: not a file (a MIOH-format file: veritune build mioh-rft)")
    load_present_classes(args.annotations)
    graphs = None
    if settings.attribute_pairs_per_image:
        graphs = args.scene_graphs or default_scene_graphs(args.annotations)
        if not graphs.is_file():
            raise UserError(
                f"{graphs}: scene graphs not found (--attribute-pairs-per-image reads them; see --scene-graphs)"
            )
    inputs = {"annotations": args.annotations, "scene_graphs": graphs, "image_root": args.image_root}
    chosen = asdict(settings)
    if chosen.pop("multi_image"):  # a file: named, and hashed, among the inputs
        inputs["multi_image"] = args.multi_image
    identity = build_identity("build warmstart-data", chosen, inputs)
    with claim_output_file(args.out, identity, force=args.force) as staged:
        manifest = write_warmstart_table(
            args.annotations, args.image_root, staged.path, settings, scene_graphs=graphs, build=identity
        )
    counts = manifest["counts"]
    print(
        f"wrote {args.out} and {manifest_path(args.out)}: {counts['examples']} examples ({counts['conventional']} "
        f"conventional, {counts['attribute_questions']} attribute questions"
        + (f", {counts['multi_image_questions']} multi-image questions)" if "multi_image_questions" in counts else ")")
    )
    if manifest["summary"]:
        print(manifest["summary"])
    return 0
