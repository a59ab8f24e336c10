"""Command-line wiring of ``veritune tiny-model`` and ``veritune tiny-clip`` (the library code is
:mod:`miniature.tiny.models` and :mod:`miniature.tiny.clip`): the offline stand-ins of the CPU walk-through
(docs/CPU_WALKTHROUGH.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from core.cli_help import command_help
from core.errors import UserError
from core.io import atomic_write_json
from core.ownership import check_replaceable
from core.quiet import use_cpu_accelerator_without_gpu


def register_tiny_model(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune tiny-model``."""
    from miniature.tiny.models import FAMILIES, SIZES

    parser = subparsers.add_parser(
        "tiny-model",
        help=command_help(None, "tiny-model"),
        description="A tiny offline VLM checkpoint. By default its language model is warmed up on R1-style answers "
        "(<REASONING>...</REASONING><SOLUTION>yes|no</SOLUTION>), so that ORIC's R1 recipes "
        "(recipes/miniature/tiny_oric_demo.yaml) earn the format reward and the accuracy reward at chance from the "
        "first step. --warm-start gives instead the demo's conventionally trained base (an SFT warm-start on the "
        "synthetic world, minutes on a CPU, cached; plain answers: recipes/miniature/tiny_oric_miniature.yaml).",
    )
    parser.add_argument("--family", choices=FAMILIES, default="qwen3vl", help="architecture of the tiny model")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed")
    parser.add_argument("--size", choices=sorted(SIZES), default="test", help="named model size (demo: the demo's)")
    parser.add_argument(
        "--format-warmup-steps", type=int, default=150, help="R1-style answer warm-up steps (0: purely random weights)"
    )
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="the demo's warm-started base (recipes/miniature/tiny_sft_warmstart.yaml), cached in $VERITUNE_CACHE",
    )
    parser.add_argument(
        "--warm-start-steps", type=int, help="with --warm-start: SFT steps instead of the recipe's (a smoke test)"
    )
    parser.add_argument(
        "--patch-size",
        type=int,
        default=None,
        help="vision patch side in pixels (default: the family's; qwen3vl's 16 gives 4 tokens per 64-px image)",
    )
    parser.add_argument(
        "--pretrain-vision",
        type=Path,
        metavar="SPLIT_DIR",
        help="then pretrain the vision tower on this synthetic-world split's objects (miniature/tiny/tower.py)",
    )
    parser.add_argument(
        "--pretrain-vision-steps", type=int, help="with --pretrain-vision: steps of 64 images (default 1000)"
    )
    parser.add_argument(
        "--pretrain-vision-eval",
        type=Path,
        metavar="SPLIT_DIR",
        help="with --pretrain-vision: a held-out split whose per-head accuracy is reported before and after",
    )
    parser.set_defaults(handler=_tiny_model)


def _tiny_model(args: argparse.Namespace) -> int:
    use_cpu_accelerator_without_gpu()  # before transformers loads DeepSpeed, which warns when it finds no GPU
    from miniature.tiny.tower import IDENTITY_FILE

    if args.warm_start_steps is not None and not args.warm_start:
        raise UserError("--warm-start-steps: only with --warm-start")
    if args.warm_start and args.patch_size is not None:
        raise UserError("--patch-size: not with --warm-start (the warm-started base is the demo's model)")
    if args.pretrain_vision is None and (
        args.pretrain_vision_eval is not None or args.pretrain_vision_steps is not None
    ):
        raise UserError("--pretrain-vision-steps and --pretrain-vision-eval: only with --pretrain-vision")
    if args.warm_start and args.pretrain_vision is not None:
        raise UserError("--pretrain-vision: not with --warm-start (the warm-started base is the demo's model)")
    check_replaceable(args.out, "--out", (IDENTITY_FILE,), "veritune tiny-model")
    if args.warm_start:
        return _warm_started(args)
    if args.pretrain_vision is not None:
        return _pretrained_vision(args)
    with _tiny_model_in_temporary_folder(args) as built:
        _replace_dir(built, args.out)
    print(f"tiny {args.family} checkpoint written to {args.out}")
    return 0


@contextlib.contextmanager
def _tiny_model_in_temporary_folder(args: argparse.Namespace) -> Iterator[Path]:
    """The tiny model ``args`` describe, built in a temporary folder beside ``--out`` that is removed afterwards
    (whatever of it was not moved to ``--out``)."""
    from miniature.tiny.models import build_tiny_model

    built = args.out.with_name(f".{args.out.name}.build-{os.getpid()}")
    try:
        build_tiny_model(
            args.family,
            built,
            seed=args.seed,
            format_warmup_steps=args.format_warmup_steps,
            size=args.size,
            patch_size=args.patch_size,
        )
        yield built
    finally:
        shutil.rmtree(built, ignore_errors=True)


def _replace_dir(built: Path, out: Path) -> None:
    """Move the finished folder ``built`` to ``out`` (checked replaceable first), the old one removed after."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(built, out)
    shutil.rmtree(old, ignore_errors=True)


def _pretrained_vision(args: argparse.Namespace) -> int:
    """The tiny model built in a temporary folder, its vision tower pretrained, then moved to ``--out``."""
    from miniature.tiny.tower import check_split, pretrain_vision_tower

    steps = 1000 if args.pretrain_vision_steps is None else args.pretrain_vision_steps
    if steps < 1:
        raise UserError(f"--pretrain-vision-steps: must be at least 1, got {steps}")
    for split in (args.pretrain_vision, args.pretrain_vision_eval):
        if split is not None:
            check_split(split)
    with _tiny_model_in_temporary_folder(args) as work:
        stats = pretrain_vision_tower(
            work, args.pretrain_vision, args.out, steps=steps, eval_split=args.pretrain_vision_eval, seed=args.seed
        )
    print(
        f"tiny {args.family} checkpoint written to {args.out}, its vision tower pretrained for {stats['steps']} "
        f"steps on {args.pretrain_vision} in {stats['seconds']} s (veritune_tiny.json)"
    )
    return 0


def _warm_started(args: argparse.Namespace) -> int:
    """The demo's stages 1 to 3 (world, random demo-size Qwen3-VL, SFT warm-start) in ``<out>.work``, then the
    base model copied to ``--out``."""
    from miniature import stages as demo
    from miniature.tiny.tower import IDENTITY_FILE

    if args.family != "qwen3vl" or args.size != "test" or args.format_warmup_steps != 150:
        raise UserError(
            "--warm-start: the demo's base is a demo-size qwen3vl; drop --family, --size and --format-warmup-steps"
        )
    if args.warm_start_steps is not None and args.warm_start_steps < 1:
        raise UserError(f"--warm-start-steps: must be at least 1, got {args.warm_start_steps}")
    work = args.out.resolve().with_name(f"{args.out.name}.work")  # the stages run from the repository
    demo.claim_demo_dir(work, "--out")
    paths = demo.demo_paths(work)
    demo.pin_threads()
    demo.build_world(paths, args.seed)
    demo.build_tiny_qwen(paths, args.seed)
    steps = () if args.warm_start_steps is None else ("--max_steps", str(args.warm_start_steps))
    demo.warm_start(paths, work, args.seed, use_cache=True, overrides=steps)
    built = args.out.with_name(f".{args.out.name}.build-{os.getpid()}")
    shutil.copytree(paths["base"], built)
    # the tiny model's record: what lets a later tiny-model replace --out
    record = {"warm_start": {"seed": args.seed, "steps": args.warm_start_steps or "recipe", "work": str(work)}}
    atomic_write_json(built / IDENTITY_FILE, record)
    _replace_dir(built, args.out)
    print(f"warm-started tiny qwen3vl written to {args.out} (world and SFT run: {work})")
    return 0


def register_tiny_clip(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune tiny-clip``."""
    parser = subparsers.add_parser(
        "tiny-clip",
        help=command_help(None, "tiny-clip"),
        description="A tiny offline CLIP (model, tokenizer, image processor) for `veritune build oric --clip-model "
        "DIR`: random weights, or trained contrastively on a COCO-format annotation file so that ORIC's "
        "CLIP-guided negatives are plausible (as the demo does).",
    )
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and training seed")
    parser.add_argument("--annotations", type=Path, help="train on this COCO-format instances.json (optional)")
    parser.add_argument("--image-root", type=Path, help="the images of --annotations")
    parser.set_defaults(handler=_tiny_clip)


def _tiny_clip(args: argparse.Namespace) -> int:
    use_cpu_accelerator_without_gpu()  # before transformers loads DeepSpeed, which warns when it finds no GPU
    from miniature.tiny.clip import build_tiny_clip, train_tiny_clip, write_trained_record

    if (args.annotations is None) != (args.image_root is None):
        raise UserError("--annotations and --image-root: give both (to train) or neither (random weights)")
    if args.annotations is not None and not args.annotations.is_file():
        raise UserError(f"--annotations: not found: {args.annotations}")
    if args.image_root is not None and not args.image_root.is_dir():
        raise UserError(f"--image-root: not a directory: {args.image_root}")
    path = build_tiny_clip(args.out, seed=args.seed)
    if args.annotations is not None:
        stats = train_tiny_clip(path, args.annotations, args.image_root, seed=args.seed)
        write_trained_record(path, stats)
        print(f"tiny CLIP written to {path}, trained on {args.annotations} ({json.dumps(stats)})")
    else:
        print(f"tiny CLIP written to {path} (random weights)")
    return 0
