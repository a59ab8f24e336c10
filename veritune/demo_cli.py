"""Command lines of ``veritune demo`` and ``veritune demo-select`` (the stages live in ``miniature.stages``, the
dev-split selection in ``miniature.selection``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune demo``."""
    from core.cli_help import command_help
    from miniature.stages import FINER_HALVES

    parser = subparsers.add_parser("demo", help=command_help(None, "demo"))
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("outputs/demo"),
        help="where everything is written (a rerun reuses the stages whose arguments and inputs are unchanged)",
    )
    parser.add_argument("--steps", type=int, default=None, help="override the GRPO recipe's max_steps")
    parser.add_argument("--seed", type=int, default=0, help="seeds the world, the models and the training runs")
    parser.add_argument(
        "--no-cache", action="store_true", help="train the warm-started bases even when cached ones exist"
    )
    parser.add_argument(
        "--finer",
        choices=FINER_HALVES,
        default="seeing",
        help="FINER's half: seeing (a base that sees attributes, DPO on contrast pairs) or tuples (a control)",
    )
    parser.add_argument(
        "--multi-image-only",
        action="store_true",
        help="only the multi-image half (MIOH-format image sets, GRPO on them) and the stages it builds on",
    )
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from core.io import hold_output_lock
    from miniature.pipeline import REPO_ROOT, run_demo

    hold_output_lock(args.out if args.out.is_absolute() else REPO_ROOT / args.out)  # one demo at a time into OUT
    if args.multi_image_only:
        from core.errors import UserError
        from miniature.multi_image_half import run_multi_image_demo

        if args.steps is not None or args.finer != "seeing":
            raise UserError("--multi-image-only: --steps and --finer belong to the ORIC and FINER halves")
        run_multi_image_demo(args.out, args.seed, use_cache=not args.no_cache)
        return 0
    run_demo(args.out, args.steps, args.seed, not args.no_cache, args.finer)
    return 0


def register_demo_select(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune demo-select``."""
    from core.cli_help import command_help
    from miniature.selection import MAX_POPE_DROP, RATIOS, SEEDS

    parser = subparsers.add_parser("demo-select", help=command_help(None, "demo-select"))
    parser.add_argument("--out", type=Path, default=Path("outputs/selection"), help="where the sweep is written")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="seeds of the world and training")
    parser.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="replay ratios to compare")
    parser.add_argument(
        "--max-pope-drop", type=float, default=MAX_POPE_DROP, help="largest mean dev POPE drop kept (points)"
    )
    parser.add_argument("--steps", type=int, default=None, help="override the GRPO recipe's max_steps")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further GRPO recipe key for every run (repeatable), e.g. dynamic_sampling=true",
    )
    parser.add_argument(
        "--multi-image",
        action="store_true",
        help="the multi-image demo's dev runs instead, one per seed, and the bound its rule fixes",
    )
    parser.set_defaults(handler=_demo_select)


def _demo_select(args: argparse.Namespace) -> int:
    from core.io import atomic_write_json, atomic_write_text, hold_output_lock
    from miniature.selection import format_selection, select_replay_ratio

    hold_output_lock(args.out)
    if args.multi_image:
        from miniature.multi_image_half import format_dev_rule, multi_image_dev_runs

        selection = multi_image_dev_runs(args.out, tuple(args.seeds))
        text = format_dev_rule(selection)
        atomic_write_json(args.out / "multi-image-selection.json", selection)
        atomic_write_text(args.out / "multi-image-selection.txt", text + "\n")
        print("\n" + text)
        return 0
    selection = select_replay_ratio(
        args.out, tuple(args.seeds), tuple(args.ratios), args.max_pope_drop, args.steps, tuple(args.overrides)
    )
    text = format_selection(selection)
    atomic_write_json(args.out / "selection.json", selection)
    atomic_write_text(args.out / "selection.txt", text + "\n")
    print("\n" + text)
    return 0
