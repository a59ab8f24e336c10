"""``veritune launch``: ``accelerate launch`` whose exit status is the worker's, without the launcher's
traceback.

    veritune launch --config_file recipes/accelerate/zero3.yaml finetune/grpo.py recipes/qwen3vl_oric.yaml

Takes exactly ``accelerate launch``'s arguments (``veritune launch --help`` prints all of them, then what
veritune adds). Without ``--config_file``, the recipe's ``accelerate_config`` key is used (the recipe named
after the training script, as the entry scripts find it); the launcher says which config it used.

When a worker fails, ``accelerate launch`` raises in the
launcher process too (``CalledProcessError`` for one process, torch elastic's ``ChildFailedError`` for
several, DeepSpeed included), so a bad recipe prints the worker's one ``error:`` line and then a second,
longer traceback from the launcher. The worker has already said what went wrong; here the launcher only
passes on its exit status (2 for a user error), adding one ``error:`` line when the worker did not exit
through veritune's own error handling (a crash or a signal).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from core.errors import (
    INTERRUPTED_EXIT_CODE,
    PARENT_SAYS_INTERRUPTED_ENV,
    USER_ERROR_EXIT_CODE,
    WORKER_ERROR_DIR_ENV,
    UserError,
    exit_on_user_error,
)
from core.secrets import withhold_token_flags

VERITUNE_HELP = """\
what veritune launch adds to accelerate launch:
  - exit status: the first failed worker's (2 for a user error), without the launcher's traceback; a user
    error is printed once, by the main process (or, when only other ranks failed, by this launcher).
  - --config_file: when not given, the recipe's `accelerate_config` key is used (the recipe after the
    training script: `finetune/grpo.py RECIPE.yaml`, `--config RECIPE.yaml` or `--recipe RECIPE.yaml`;
    an `--accelerate_config PATH` override among the script's arguments wins); the launcher prints which
    config it used.
  - a Hugging Face token among the script's arguments (--hub_token, a "token" in --model_init_kwargs)
    reaches the workers in HF_TOKEN, not on their command lines (which every user of a node can read).

example:
  veritune launch --num_processes 4 finetune/grpo.py recipes/qwen3vl_oric.yaml   # recipes/accelerate/zero3.yaml
"""


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
    from core.errors import UserError
    from core.wandb_login import require_wandb_login
    from finetune.recipe import recipe_report_to

    try:
        require_wandb_login(recipe_report_to(list(script_args)), f"{Path(script).name}: report_to names wandb")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return False
    return True


class _FullHelpFormatter(argparse.HelpFormatter):
    """accelerate's help layout (one spelling per option) without its filter, which hides every section but
    a few unless the help is asked for as exactly ``accelerate launch --help`` (it reads ``sys.argv``)."""

    def add_argument(self, action: argparse.Action) -> None:
        action.option_strings = [s for s in action.option_strings if "-" not in s[2:]]
        super().add_argument(action)


def _wants_help(argv: list[str]) -> bool:
    """``-h``/``--help`` before the training script (after it, the flag belongs to the script)."""
    script = next((i for i, arg in enumerate(argv) if arg.endswith(".py")), len(argv))
    return any(arg in ("-h", "--help") for arg in argv[:script])


def launch_parser() -> argparse.ArgumentParser:
    """accelerate launch's own parser, named ``veritune launch``, with veritune's additions in its help."""
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    parser.prog = "veritune launch"
    parser.description = (
        f"accelerate launch, with the worker's exit status and the recipe's accelerate_config. {parser.description}."
    )
    parser.epilog = VERITUNE_HELP
    parser.formatter_class = type("_Formatter", (_FullHelpFormatter, argparse.RawDescriptionHelpFormatter), {})
    return parser


def recipe_accelerate_config(script_args: list[str]) -> str | None:
    """The ``accelerate_config`` of the recipe among a training script's arguments (an ``--accelerate_config``
    override first), resolved as the entry scripts resolve recipe paths; None without a recipe or the key."""
    from core.recipe_file import recipe_path_value
    from finetune.recipe import pop_recipe_path

    args = list(script_args)
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == "--accelerate_config":
            value = value if eq else (args[index + 1] if index + 1 < len(args) else "")
            if not Path(value).is_file():
                raise UserError(f"command line: --accelerate_config: {value} does not exist")
            return value
    recipe = pop_recipe_path(args)
    if recipe is None or not recipe.is_file():
        return None  # the entry script reports a missing recipe itself
    return recipe_path_value(recipe, "accelerate_config")


def _choose_config(args: argparse.Namespace) -> None:
    """Fill ``--config_file`` from the recipe when it is not given, and say which config runs."""
    if args.config_file:
        source = "--config_file"
    else:
        args.config_file = recipe_accelerate_config(list(args.training_script_args))
        source = "the recipe's accelerate_config"
    if args.config_file:
        print(f"veritune launch: accelerate config {args.config_file} ({source})", file=sys.stderr, flush=True)
    else:
        print("veritune launch: no accelerate config (accelerate's defaults and flags)", file=sys.stderr, flush=True)


def _worker_message(error_dir: str) -> str | None:
    """The error line a worker of rank > 0 left in ``error_dir`` (it printed none), when rank 0 printed none."""
    folder = Path(error_dir)
    if (folder / "rank0.txt").is_file():
        return None
    lines = sorted(folder.glob("rank*.txt"), key=lambda path: int(path.stem[4:]))
    return lines[0].read_text(encoding="utf-8").rstrip("\n") if lines else None


ENTRY_SCRIPTS = {  # veritune's entry scripts: the dataclasses each parses its recipe into
    "grpo.py": ("finetune.configs", ("GRPOScriptArguments", "VerituneGRPOConfig", "VerituneModelConfig")),
    "dpo.py": ("finetune.configs", ("DPOScriptArguments", "VerituneDPOConfig", "VerituneModelConfig")),
    "sft.py": ("finetune.sft", ("SFTScriptArguments", "VerituneSFTConfig", "VerituneModelConfig")),
}


def entry_dataclasses(script: str) -> tuple[type, ...] | None:
    """The dataclasses of ``script`` when it is one of veritune's entry scripts (``finetune/grpo.py`` ...)."""
    import importlib

    path = Path(script).resolve()
    if path.parent != Path(__file__).resolve().parents[1] / "finetune" or path.name not in ENTRY_SCRIPTS:
        return None
    module_name, names = ENTRY_SCRIPTS[path.name]
    module = importlib.import_module(module_name)
    return tuple(getattr(module, name) for name in names)


def _process_count(args: argparse.Namespace) -> int:
    """The processes this launch starts: ``--num_processes``, else the accelerate config's, else 1."""
    if args.num_processes:
        return int(args.num_processes)
    if args.config_file:
        from accelerate.commands.config.config_args import load_config_from_file

        return int(getattr(load_config_from_file(args.config_file), "num_processes", None) or 1)
    return 1


def check_recipe_here(args: argparse.Namespace) -> None:
    """Parse the training script's recipe and overrides here, as each worker will (``finetune.recipe.parse_recipe``
    on this machine: unknown keys, launcher flags after the script, values, bf16 / fp16 or vLLM without a GPU),
    before any worker starts; the workers say what the run does.

    Raises:
        UserError: the worker's one line, at once.
    """
    types = entry_dataclasses(args.training_script)
    if types is None:  # another script: its own parser decides
        return
    from accelerate.state import AcceleratorState

    from finetune.recipe import parse_recipe

    config_type = types[1]
    processes = _process_count(args)
    own = config_type.__dict__.get("world_size")
    config_type.world_size = property(lambda self: processes)  # type: ignore[attr-defined]  # as the workers count
    quiet = logging.getLogger("veritune")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # what a parse logs, each worker logs itself
    environment = dict(os.environ)
    try:
        parse_recipe(list(args.training_script_args), types, here=True)
    finally:
        quiet.setLevel(level)
        if own is not None:
            config_type.world_size = own  # type: ignore[attr-defined]
        else:
            del config_type.world_size
        AcceleratorState._reset_state(reset_partial_state=True)  # TrainingArguments' device set-up, here only
        os.environ.clear()
        os.environ.update(environment)


def launch(argv: list[str]) -> int:
    """Run ``accelerate launch argv``; the exit status of the first failed worker, or 0."""
    from core.quiet import use_cpu_accelerator_without_gpu

    use_cpu_accelerator_without_gpu()  # before accelerate loads DeepSpeed here; the workers inherit it
    from accelerate.commands.launch import launch_command

    parser = launch_parser()
    if _wants_help(argv):
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    args.training_script_args = withhold_token_flags(args.training_script_args)  # off the workers' `ps` lines
    if not check_worker_wandb(args.training_script, args.training_script_args):
        return USER_ERROR_EXIT_CODE
    _choose_config(args)
    check_recipe_here(args)
    # torch elastic logs each failed worker at ERROR level before raising; the summary below replaces it.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="veritune-launch-") as error_dir:
        os.environ[WORKER_ERROR_DIR_ENV] = error_dir  # workers of rank > 0 leave their error line here
        says_interrupted = PARENT_SAYS_INTERRUPTED_ENV not in os.environ  # else a veritune process above says it
        os.environ[PARENT_SAYS_INTERRUPTED_ENV] = "1"  # on Ctrl-C the workers leave "interrupted" to the launcher
        try:
            launch_command(args)
        except subprocess.CalledProcessError as err:
            if err.returncode == INTERRUPTED_EXIT_CODE:  # the worker's Ctrl-C, the launcher's missed (not a tty)
                raise KeyboardInterrupt from None
            return _failed(err.returncode)
        except Exception as err:  # torch elastic's ChildFailedError (imported lazily: torch is heavy)
            from torch.distributed.elastic.multiprocessing.api import SignalException
            from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

            if isinstance(err, SignalException) and err.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None  # torch elastic's form of Ctrl-C in the launcher
            if not isinstance(err, ChildFailedError):
                raise
            message = _worker_message(error_dir)
            if message:
                print(message, file=sys.stderr, flush=True)
            rank, failure = err.get_first_failure()
            return _failed(failure.exitcode, rank)
        finally:
            os.environ.pop(WORKER_ERROR_DIR_ENV, None)
            if says_interrupted:
                os.environ.pop(PARENT_SAYS_INTERRUPTED_ENV, None)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune launch`` (all arguments are passed to ``accelerate launch``)."""
    from core.cli_help import command_help

    parser = subparsers.add_parser(
        "launch",
        help=command_help(None, "launch"),
        add_help=False,
        prefix_chars="\0",  # every argument, --help included, belongs to accelerate launch
    )
    parser.add_argument("accelerate_args", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=lambda args: launch(args.accelerate_args))


if __name__ == "__main__":
    sys.exit(exit_on_user_error(launch)(sys.argv[1:]))
