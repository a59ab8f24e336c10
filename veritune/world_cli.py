"""``veritune build synthetic-world`` and ``veritune build scene-graphs``: offline demo data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.cli_help import command_help


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build synthetic-world`` and ``veritune build scene-graphs``."""
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
        help="none: each instance has a light or dark shade (the world as before this flag); drawn: also a black "
        "or white border and a striped or plain pattern, with scene graphs of shade, border and pattern whose one "
        "negative is the other value, for `build finer-bench --protocol yn` (the letter protocol's multi-attr and "
        "multi-rel questions need the default graphs' four negatives)",
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
