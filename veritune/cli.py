"""The veritune command line: one entry point for data builders, evaluation, reports and demos.

Commands are listed in :data:`COMMANDS` by name, with their help line and the ``module:function`` that adds
their parser. ``veritune --help`` and ``veritune build --help`` import nothing else; a command's module is
imported only when that command runs or its own ``--help`` is asked, so the help answers at once (torch is
never imported to print it). The wiring function takes ``subparsers`` and adds one or more commands, each
with ``handler`` (a function taking the parsed ``argparse.Namespace`` and returning an exit code or None).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import NoReturn

from veritune import __version__
from veritune.core.errors import exit_on_user_error


@dataclass(frozen=True)
class Command:
    """One ``veritune [GROUP] NAME`` command: its help line and the function that adds its parser."""

    group: str | None
    name: str
    target: str  # "module:function(subparsers)"; several commands may share one target
    help: str


COMMANDS: list[Command] = [
    Command(
        None,
        "demo",
        "veritune.demo_cli:register_demo",
        "the miniature ORIC and FINER experiments: world -> base -> GRPO / DPO -> before/after",
    ),
    Command(
        None,
        "demo-select",
        "veritune.demo_cli:register_demo_select",
        "select the miniature GRPO recipe's replay ratio on the world's dev split (never the benchmarks)",
    ),
    Command(
        None,
        "tiny-model",
        "veritune.tiny.cli:register_tiny_model",
        "build a tiny VLM checkpoint offline (R1 answers warmed up; --warm-start: the demo's trained base)",
    ),
    Command(
        None,
        "tiny-clip",
        "veritune.tiny.cli:register_tiny_clip",
        "build a tiny CLIP offline for `build oric --clip-model` (random, or trained on an annotation file)",
    ),
    Command(None, "slurm", "veritune.slurm_submit:register", "submit veritune jobs to a Slurm cluster"),
    Command(
        None,
        "launch",
        "veritune.launch:register",
        "`accelerate launch` that exits with the worker's status, without the launcher's traceback",
    ),
    Command(
        "build",
        "synthetic-world",
        "data_builders.cli:register",
        "draw a synthetic COCO-format image world (offline demo data)",
    ),
    Command(
        "build",
        "scene-graphs",
        "data_builders.cli:register",
        "FINER-layout scene graphs of a synthetic world (input of `build finer`)",
    ),
    Command(
        "build",
        "oric",
        "data_builders.oric.cli:register",
        "ORIC-style GRPO training questions (paper: 300 yes + 300 no)",
    ),
    Command("build", "oric-bench", "data_builders.oric.cli:register", "ORIC-Bench (paper: 1,000 yes + 1,000 no)"),
    Command("build", "check-leakage", "data_builders.oric.cli:register", "fail when two ORIC files share an image"),
    Command(
        "build",
        "finer",
        "data_builders.finer.cli:register",
        "FINER-Tuning DPO preference tuples (scene graphs or captions + LLM)",
    ),
    Command(
        "build",
        "finer-bench",
        "data_builders.finer.cli:register",
        "FINER MCQ benchmark (Multi-obj/attr/rel, Wh) or yes/no probe (--protocol yn) from scene graphs",
    ),
    Command(
        "build",
        "finer-contrast",
        "data_builders.finer.cli:register",
        "DPO pairs that ask one yes/no-probe description on an image where it is true and one where it is false",
    ),
    Command("eval", "run", "eval_hooks.cli:register", "generate answers with a model and score them"),
    Command("eval", "watch", "eval_hooks.cli:register", "evaluate each new checkpoint of a training run as it appears"),
    Command("eval", "score", "eval_hooks.cli:register", "score a predictions file (no model is loaded)"),
    Command(
        None,
        "report",
        "veritune.report_cli:register",
        "write a static HTML report of a training run or an eval run (opens offline)",
    ),
]

GROUP_HELP = {
    "build": "build training data and benchmarks (ORIC, FINER, synthetic worlds)",
    "eval": "run and score hallucination benchmarks",
}


def command_help(group: str | None, name: str) -> str:
    """The help line of ``veritune [group] name`` (the one listed in :data:`COMMANDS`)."""
    return next(c.help for c in COMMANDS if (c.group, c.name) == (group, name))


def _no_default(value: object) -> bool:
    return value is None or value is False or value is argparse.SUPPRESS or (isinstance(value, list) and not value)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none (None, False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or _no_default(action.default) or action.nargs == 0:
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "default: %(default)s"
        return text


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every parser below it :class:`HelpFormatter`; options without help show their default."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                show_defaults(child)
        elif action.help is None and action.option_strings and not _no_default(action.default):
            action.help = ""
            action.help = HelpFormatter("x")._get_help_string(action)


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
    code = handler(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
