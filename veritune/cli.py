"""The ``veritune`` command line: one entry point for data builders, evaluation, reports and demos.

Commands live next to the code they drive. Each module listed in :data:`COMMAND_MODULES` defines
``register(subparsers)``, which adds its sub-commands and sets ``handler`` (a function taking the parsed
``argparse.Namespace`` and returning an exit code or None) on each of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from veritune import __version__
from veritune.errors import exit_on_user_error

# (group, module): group None registers top-level commands, "build" registers `veritune build ...`,
# "eval" registers `veritune eval ...`.
COMMAND_MODULES: list[tuple[str | None, str]] = [
    (None, "veritune.demo"),
    (None, "veritune.tiny_models"),
    (None, "veritune.slurm_submit"),
    (None, "veritune.launch"),
    ("build", "data_builders.synthetic_world"),
    ("build", "data_builders.oric.cli"),
    ("build", "data_builders.finer.cli"),
    ("build", "data_builders.finer.synthetic"),
    ("eval", "eval_hooks.cli"),
    (None, "eval_hooks.report"),
]

GROUP_HELP = {
    "build": "build training data and benchmarks (ORIC, FINER, synthetic worlds)",
    "eval": "run and score hallucination benchmarks",
}


def build_parser() -> argparse.ArgumentParser:
    """The full ``veritune`` argument parser with every registered command."""
    parser = argparse.ArgumentParser(prog="veritune", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"veritune {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str | None, argparse._SubParsersAction] = {None: top}
    for group, module_name in COMMAND_MODULES:
        if group not in groups:
            group_parser = top.add_parser(group, help=GROUP_HELP.get(group, ""))
            groups[group] = group_parser.add_subparsers(dest=f"{group}_command", metavar="COMMAND")
            group_parser.set_defaults(handler=lambda args, p=group_parser: p.print_help() or 2)
        importlib.import_module(module_name).register(groups[group])
    return parser


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    code = handler(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
