"""Command-line wiring of ``veritune tiny-model`` (the library code is :mod:`veritune.tiny.models`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from veritune.cli import command_help


def register_tiny_model(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune tiny-model``."""
    from veritune.tiny.models import FAMILIES, SIZES

    parser = subparsers.add_parser("tiny-model", help=command_help(None, "tiny-model"))
    parser.add_argument("--family", choices=FAMILIES, default="qwen3vl", help="architecture of the tiny model")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed")
    parser.add_argument("--size", choices=sorted(SIZES), default="test", help="named model size (demo: the demo's)")
    parser.add_argument(
        "--format-warmup-steps", type=int, default=150, help="R1-style answer warm-up steps (0: purely random weights)"
    )
    parser.add_argument(
        "--patch-size",
        type=int,
        default=None,
        help="vision patch side in pixels (default: the family's, 16 for qwen3vl: 4 tokens per 64-px image; "
        "8 gives 16)",
    )
    parser.set_defaults(handler=_tiny_model)


def _tiny_model(args: argparse.Namespace) -> int:
    from veritune.tiny.models import build_tiny_model

    path = build_tiny_model(
        args.family,
        args.out,
        seed=args.seed,
        format_warmup_steps=args.format_warmup_steps,
        size=args.size,
        patch_size=args.patch_size,
    )
    print(f"tiny {args.family} checkpoint written to {path}")
    return 0
