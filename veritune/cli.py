"""The veritune command line: one entry point for data builders, evaluation, reports and demos.

Commands are listed in :data:`COMMANDS` by name, with the ``module:function`` that adds their parser; their
help lines live below the command modules, in ``core/cli_help.py``. ``veritune --help`` and ``veritune build
--help`` import nothing else; a command's module is imported only when that command runs or its own ``--help``
is asked, so the help answers at once (torch is never imported to print it). The wiring function takes
``subparsers`` and adds one or more commands, each with ``handler`` (a function taking the parsed
``argparse.Namespace`` and returning an exit code or None).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import NoReturn

from core.cli_help import GROUP_HELP, HelpFormatter, command_help, show_defaults  # noqa: F401
from core.errors import exit_on_user_error
from core.lock import release_all, set_command
from veritune import __version__


@dataclass(frozen=True)
class Command:
    """One ``veritune [GROUP] NAME`` command: its help line and the function that adds its parser."""

    group: str | None
    name: str
    target: str  # "module:function(subparsers)"; several commands may share one target

    @property
    def help(self) -> str:
        return command_help(self.group, self.name)


COMMANDS: list[Command] = [
    Command(None, "demo", "veritune.demo_cli:register_demo"),
    Command(None, "demo-select", "veritune.demo_cli:register_demo_select"),
    Command(None, "tiny-model", "veritune.tiny_cli:register_tiny_model"),
    Command(None, "tiny-clip", "veritune.tiny_cli:register_tiny_clip"),
    Command(None, "slurm", "veritune.slurm_submit:register"),
    Command(None, "launch", "veritune.launch:register"),
    Command("build", "synthetic-world", "veritune.world_cli:register"),
    Command("build", "scene-graphs", "veritune.world_cli:register"),
    Command("build", "warmstart-data", "veritune.world_cli:register"),
    Command("build", "oric", "data_builders.oric.cli:register"),
    Command("build", "oric-bench", "data_builders.oric.cli:register"),
    Command("build", "check-leakage", "data_builders.oric.cli:register"),
    Command("build", "finer", "data_builders.finer.cli:register"),
    Command("build", "finer-bench", "data_builders.finer.cli:register"),
    Command("build", "finer-contrast", "data_builders.finer.cli:register"),
    Command("build", "mioh-rft", "data_builders.mioh.cli:register"),
    Command("eval", "run", "eval_hooks.cli:register"),
    Command("eval", "watch", "eval_hooks.cli:register"),
    Command("eval", "score", "eval_hooks.cli:register"),
    Command(None, "report", "veritune.report_cli:register"),
]


def _selected(argv: list[str]) -> tuple[str | None, str | None]:
    """The command (and, for a group, the sub-command) named on the command line, before any parsing."""
    words = [word for word in argv if not word.startswith("-")]
    first = words[0] if words else None
    second = words[1] if len(words) > 1 and first in GROUP_HELP else None
    return first, second


def _wire(target: str, subparsers: argparse._SubParsersAction) -> None:
    module_name, function = target.split(":")
    getattr(importlib.import_module(module_name), function)(subparsers)


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``error:`` line (naming the command and pointing to its
    ``--help``) and exit 2, like every other user error, instead of argparse's page of usage."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``veritune`` parser. With ``argv``, only the module of the command it names is imported (the other
    commands get a help-only placeholder); without, every command is wired (used by tests and docs)."""
    parser = OneLineErrorParser(
        prog="veritune", description="veritune: build data, fine-tune, evaluate and report on vision-language models"
    )
    parser.add_argument("--version", action="version", version=f"veritune {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str | None, argparse._SubParsersAction] = {None: top}
    first, second = _selected(argv) if argv is not None else (None, None)
    chosen = {c.target for c in COMMANDS if argv is None or (c.group, c.name) in ((None, first), (first, second))}
    wired: set[str] = set()
    for command in COMMANDS:
        if command.group not in groups:
            group_parser = top.add_parser(command.group, help=GROUP_HELP.get(command.group, ""))
            groups[command.group] = group_parser.add_subparsers(dest=f"{command.group}_command", metavar="COMMAND")
            group_parser.set_defaults(handler=lambda args, p=group_parser: p.print_help() or 2)
        if command.target not in chosen:
            groups[command.group].add_parser(command.name, help=command.help, add_help=False).set_defaults(handler=None)
        elif command.target not in wired:
            _wire(command.target, groups[command.group])
            wired.add(command.target)
    show_defaults(parser)
    return parser


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    from core.quiet import hide_model_file_bars

    hide_model_file_bars()
    set_command(" ".join(["veritune", *(word for word in _selected(argv) if word)]))
    try:
        code = handler(args)
    finally:
        release_all()  # the folders this command locked (core.lock), free for the next command
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
