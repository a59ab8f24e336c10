"""``veritune report``: the HTML report of a training run or of an ``eval run`` folder (:mod:`veritune.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli_help import command_help


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune report``."""
    parser = subparsers.add_parser("report", help=command_help(None, "report"))
    parser.add_argument("run_dir", type=Path, help="a training run's output_dir, or an `eval run --out` folder")
    parser.add_argument("--out", type=Path, help="output HTML file (default: RUN_DIR/report.html)")
    parser.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from veritune.report import write_report

    print(f"wrote {write_report(args.run_dir, args.out)}")
    return 0
