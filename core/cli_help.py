"""The help text of the ``veritune`` commands and the option helpers their parsers share, below the command line.

Each command module (``veritune/demo_cli.py``, ``data_builders/oric/cli.py``, ``eval_hooks/cli.py``, ...) takes
its help line from :func:`command_help` here, so none of them imports ``veritune.cli``, which imports them:
``veritune --help`` lists the same lines without importing the modules. :func:`add_llm_arguments` and
:func:`llm_client_options` are the one LLM flag family of ``build oric``, ``build finer``, ``build finer-bench``
and the eval judge.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# The help line of ``veritune [GROUP] NAME``, by group (None: the top-level commands) and name, in the order
# ``veritune --help`` lists them.
HELP: dict[str | None, dict[str, str]] = {
    None: {
        "demo": "the miniature ORIC and FINER experiments: world -> base -> GRPO / DPO -> before/after",
        "demo-select": (
            "select the miniature GRPO recipe's replay ratio on the world's dev split (never the benchmarks)"
        ),
        "tiny-model": (
            "build a tiny VLM checkpoint offline (R1 answers warmed up; --warm-start: the demo's trained base)"
        ),
        "tiny-clip": (
            "build a tiny CLIP offline for `build oric --clip-model` (random, or trained on an annotation file)"
        ),
        "slurm": "submit veritune jobs to a Slurm cluster",
        "launch": "`accelerate launch` that exits with the worker's status, without the launcher's traceback",
        "report": "write a static HTML report of a training run or an eval run (opens offline)",
    },
    "build": {
        "synthetic-world": "draw a synthetic COCO-format image world (offline demo data)",
        "scene-graphs": "FINER-layout scene graphs of a synthetic world (input of `build finer`)",
        "warmstart-data": "the SFT warm-start's prompt-completion table from a COCO instances file (finetune/sft.py)",
        "oric": "ORIC-style GRPO training questions (paper: 300 yes + 300 no)",
        "oric-bench": "ORIC-Bench (paper: 1,000 yes + 1,000 no)",
        "check-leakage": "fail when two ORIC files share an image",
        "finer": "FINER-Tuning DPO preference tuples (scene graphs or captions + LLM)",
        "finer-bench": "FINER MCQ benchmark (Multi-obj/attr/rel, Wh) or yes/no probe (--protocol yn) from scene graphs",
        "finer-contrast": (
            "DPO pairs that ask one yes/no-probe description on an image where it is true and one where it is false"
        ),
        "mioh-rft": "MIOH-format multi-image questions (training data and a bench) from a COCO instances file",
    },
    "eval": {
        "run": "generate answers with a model and score them",
        "watch": "evaluate each new checkpoint of a training run as it appears",
        "score": "score a predictions file (no model is loaded)",
    },
}

GROUP_HELP = {
    "build": "build training data and benchmarks (ORIC, FINER, MIOH, synthetic worlds)",
    "eval": "run and score hallucination benchmarks",
}


def command_help(group: str | None, name: str) -> str:
    """The help line of ``veritune [group] name`` (the one ``veritune --help`` lists)."""
    return HELP[group][name]


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


# ---- the one LLM flag family, shared by `build oric`, `build finer`, `build finer-bench` and the eval judge


def add_llm_arguments(
    parser: argparse.ArgumentParser,
    purpose: str,
    *,
    cache: str = "outputs/cache/llm.sqlite",
    max_tokens: int | None = 512,
    model_help: str = "model name sent to the endpoint (recorded with the output)",
    aliases: str | None = None,
) -> argparse._ArgumentGroup:
    """Add ``--llm-base-url``, ``--llm-model``, ``--llm-cache``, ``--llm-timeout``, ... to ``parser``.

    ``aliases="judge"`` also accepts the deprecated ``--judge-base-url`` style spellings (hidden from help).
    """
    group = parser.add_argument_group(f"LLM ({purpose}; any OpenAI-compatible endpoint: vLLM, SGLang, OpenAI, ...)")
    group.add_argument("--llm-base-url", help="endpoint, e.g. http://127.0.0.1:8000/v1")
    group.add_argument("--llm-model", help=model_help)
    group.add_argument(
        "--llm-api-key-env",
        metavar="NAME",
        help="variable holding the API key sent to --llm-base-url (default: none; OPENAI_API_KEY for OpenAI)",
    )
    group.add_argument(
        "--llm-cache",
        type=Path,
        default=Path(cache),
        help="SQLite answer cache: a rerun sends no request already answered",
    )
    group.add_argument("--llm-concurrency", type=int, default=8, help="requests in flight at once")
    group.add_argument(
        "--llm-max-retries",
        type=int,
        default=5,
        help="retries per request on timeouts, connection errors, 408/409/429 and 5xx",
    )
    group.add_argument("--llm-timeout", type=float, default=60.0, help="seconds per request")
    group.add_argument("--llm-temperature", type=float, default=0.0, help="sampling temperature")
    group.add_argument("--llm-max-tokens", type=int, default=max_tokens, help="answer length budget")
    if aliases:
        for name in ("base_url", "model", "api_key_env", "cache"):
            flag = f"--{aliases}-{name.replace('_', '-')}"
            group.add_argument(
                flag,
                dest=f"llm_{name}",
                type=Path if name == "cache" else str,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
    return group


def llm_client_options(args: argparse.Namespace) -> dict:
    """The :class:`~core.llm_client.ChatClient` keyword options from :func:`add_llm_arguments`' flags,
    checked (one ``error:`` line naming the flag)."""
    from core.errors import UserError

    for flag, value, least in (
        ("--llm-concurrency", args.llm_concurrency, 1),
        ("--llm-max-retries", args.llm_max_retries, 0),
        ("--llm-timeout", args.llm_timeout, 1e-9),
        ("--llm-temperature", args.llm_temperature, 0.0),
        ("--llm-max-tokens", args.llm_max_tokens if args.llm_max_tokens is not None else 1, 1),
    ):
        if value < least:
            raise UserError(f"{flag}: must be {'positive' if least == 1e-9 else f'at least {least:g}'}, got {value:g}")
    return {
        "cache_path": args.llm_cache,
        "api_key_env": args.llm_api_key_env,
        "concurrency": args.llm_concurrency,
        "max_retries": args.llm_max_retries,
        "timeout": args.llm_timeout,
        "temperature": args.llm_temperature,
        "max_tokens": args.llm_max_tokens,
    }
