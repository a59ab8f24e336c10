"""``veritune launch``: ``accelerate launch`` whose exit status is the worker's, without the launcher's
traceback.

    veritune launch --config_file recipes/accelerate/zero3.yaml finetune/grpo.py recipes/qwen3vl_oric.yaml

Takes exactly ``accelerate launch``'s arguments. When a worker fails, ``accelerate launch`` raises in the
launcher process too (``CalledProcessError`` for one process, torch elastic's ``ChildFailedError`` for
several, DeepSpeed included), so a bad recipe prints the worker's one ``error:`` line and then a second,
longer traceback from the launcher. The worker has already said what went wrong; here the launcher only
passes on its exit status (2 for a user error), adding one ``error:`` line when the worker did not exit
through veritune's own error handling (a crash or a signal).
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from pathlib import Path

from veritune.core.errors import USER_ERROR_EXIT_CODE


def _describe(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _failed(exitcode: int, rank: int | None = None) -> int:
    """The launcher's exit status for a worker that ended with ``exitcode`` (a signal becomes 128 + N)."""
    if exitcode != USER_ERROR_EXIT_CODE:  # a user error has printed its own line already
        where = f"worker rank {rank}" if rank is not None else "the worker"
        print(f"error: {where} failed ({_describe(exitcode)}); its output above says why", file=sys.stderr, flush=True)
    return 128 - exitcode if exitcode < 0 else exitcode


def check_worker_wandb(script: str, script_args: list[str]) -> bool:
    """Check here, before any worker starts, that W&B can log when the script's recipe and overrides name it in
    ``report_to`` (read as the entry script reads them: ``finetune.recipe.recipe_report_to``); False after printing
    one ``error:`` line when it cannot."""
    from finetune.recipe import recipe_report_to
    from veritune.core.errors import UserError
    from veritune.core.wandb_login import require_wandb_login

    try:
        require_wandb_login(recipe_report_to(list(script_args)), f"{Path(script).name}: report_to names wandb")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return False
    return True


def launch(argv: list[str]) -> int:
    """Run ``accelerate launch argv``; the exit status of the first failed worker, or 0."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(argv)
    if not check_worker_wandb(args.training_script, args.training_script_args):
        return USER_ERROR_EXIT_CODE
    # torch elastic logs each failed worker at ERROR level before raising; the summary below replaces it.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        launch_command(args)
    except subprocess.CalledProcessError as err:
        return _failed(err.returncode)
    except Exception as err:  # torch elastic's ChildFailedError (imported lazily: torch is heavy)
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

        if not isinstance(err, ChildFailedError):
            raise
        rank, failure = err.get_first_failure()
        return _failed(failure.exitcode, rank)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune launch`` (all arguments are passed to ``accelerate launch``)."""
    from veritune.cli import command_help

    parser = subparsers.add_parser(
        "launch",
        help=command_help(None, "launch"),
        add_help=False,
        prefix_chars="\0",  # every argument, --help included, belongs to accelerate launch
    )
    parser.add_argument("accelerate_args", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=lambda args: launch(args.accelerate_args))


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
