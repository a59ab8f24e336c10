"""Recipe parsing: ``script.py RECIPE.yaml [--key value ...]`` into TRL-style dataclasses.

A recipe is flat YAML, one key per dataclass field, which may start from shared bases (``include:``,
:mod:`core.recipe_file`). Command-line flags override recipe keys. A key or flag that no dataclass
knows is a one-line error naming the file that set it and the closest valid key.

Where a recipe is checked, all before any model loads (:func:`parse_recipe`; docs/ARCHITECTURE.md, "Where a
recipe key is checked"): a value's type by the parser, as the same ``--key value`` flag is
(:func:`parse_recipe_value`); a key's range, and what keys of one dataclass allow together, in the dataclass that
owns them (``__post_init__`` of finetune/configs.py, and TRL's own); what joins keys of two dataclasses in
:func:`check_across_dataclasses`. The paths a run reads are checked when it starts
(:func:`finetune.training.check_run_paths`).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from transformers import HfArgumentParser

from core.errors import UserError, exit_on_user_error
from core.recipe_file import load_recipe_file, read_recipe, resolve_recipe_paths
from core.secrets import redact_argv


def valid_keys(dataclass_types: tuple[type, ...]) -> set[str]:
    """Every key a recipe for these dataclasses may set."""
    return {f.name for cls in dataclass_types for f in fields(cls) if f.init}


def closest_key(key: str, keys: set[str]) -> str | None:
    """The valid key most like ``key``, or None when nothing is close."""
    matches = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.6)
    return matches[0] if matches else None


def launcher_flags() -> set[str]:
    """The flags of ``accelerate launch`` (and so of ``veritune launch``), without their leading ``--``."""
    from accelerate.commands.launch import launch_command_parser

    options = (option for action in launch_command_parser()._actions for option in action.option_strings)
    return {option[2:] for option in options if option.startswith("--")}


def _unknown_key_message(source: str, key: str, keys: set[str]) -> str:
    if source == "command line" and key in launcher_flags():
        return (
            f"command line: --{key} is a flag of veritune launch (accelerate launch), not of the training script: "
            f"put it before the script (veritune launch --{key} ... finetune/grpo.py RECIPE.yaml)"
        )
    suggestion = closest_key(key, keys)
    hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
    return f"{source}: unknown key '{key}'{hint}"


def load_recipe(
    path: str | os.PathLike[str], dataclass_types: tuple[type, ...], parser: HfArgumentParser | None = None
) -> dict[str, Any]:
    """Read a recipe with its ``include:`` bases merged (:func:`core.recipe_file.load_recipe_file`), check every
    key against the dataclasses' fields and read every value as the parser (``parser``, else
    :func:`recipe_parser`'s) reads the same ``--key value`` flag (:func:`parse_recipe_value`), each error naming
    the file that set the key; its relative paths are resolved against that file
    (:func:`core.recipe_file.resolve_recipe_paths`)."""
    recipe = load_recipe_file(path)
    keys = valid_keys(dataclass_types)
    for key, source in recipe.sources.items():
        if key not in keys:
            raise UserError(_unknown_key_message(str(source), str(key), keys))
    parser = parser or recipe_parser(dataclass_types)
    shapes = yaml_shapes(dataclass_types)
    recipe.values = {
        key: parse_recipe_value(parser, shapes, key, value, str(recipe.sources[key]))
        for key, value in recipe.values.items()
    }
    return resolve_recipe_paths(recipe)


# ---------------------------------------------------------------------------------------------- value types
#
# A recipe value is read by the parser, as the same `--key value` flag is (HfArgumentParser's `type=`, `choices`
# and `nargs`), so that a key's type comes from its dataclass field and nothing here re-implements it. What YAML
# can say and a flag cannot (null, a list, a mapping) is allowed where the field's declared type admits it.

# List keys whose bare string means something of its own (PEFT: "all-linear" or a regex of module names).
_STRING_FOR_A_LIST = {"lora_target_modules"}


def recipe_parser(dataclass_types: tuple[type, ...]) -> HfArgumentParser:
    """The entry script's parser: no abbreviated flags (`--learning_rat` is an error, not a prefix match), and a
    bad value raised as :class:`argparse.ArgumentError` for its caller to name (the recipe file or the command
    line), never argparse's page of usage."""
    parser = HfArgumentParser(dataclass_types, exit_on_error=False)
    parser.allow_abbrev = False
    parser.error = _raise_usage_error("command line")  # what argparse reports without an ArgumentError
    return parser


@functools.cache
def yaml_shapes(dataclass_types: tuple[type, ...]) -> dict[str, set[type]]:
    """Per key, which of null, a list, a mapping and a string the field's declared type admits: what a YAML
    value may be beyond the one type argparse keeps per flag (``report_to: [wandb]``, ``model_init_kwargs: {}``)."""
    shapes: dict[str, set[type]] = {}
    for cls in dataclass_types:
        hints = typing.get_type_hints(cls)  # as HfArgumentParser resolves them
        for f in fields(cls):
            tp = hints.get(f.name)
            union = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
            shapes[f.name] = {typing.get_origin(arg) or arg for arg in union} & {type(None), list, dict, str}
    return shapes


def parse_recipe_value(
    parser: HfArgumentParser, shapes: dict[str, set[type]], key: str, value: Any, source: str
) -> Any:
    """``value`` of recipe key ``key`` as the parser reads ``--key=value`` (a list item by item, as its ``nargs``
    flag takes them); null, a mapping or a list only where the field admits one (:func:`yaml_shapes`).

    Raises:
        UserError: ``"<source>: <key>: invalid int value: 'eight'"`` (the parser's words), ``"... expected one
            value, got [1, 2]"``, ``"... expected a list, got 'accuracy' (write a list: [accuracy])"``.
    """
    action = next(action for action in parser._actions if f"--{key}" in action.option_strings)
    takes_list = action.nargs in ("+", "*")
    admits = shapes.get(key, set())
    if value is None or isinstance(value, dict):
        if type(value) in admits:
            return value  # nothing a flag could spell: the dataclass takes it as it is
        if value is None:
            raise UserError(f"{source}: {key}: expected a value, got null (leave the key out for its default)")
        raise UserError(f"{source}: {key}: expected {'a list' if takes_list else 'one value'}, got {value!r}")
    if isinstance(value, list):
        if not takes_list and list not in admits:
            raise UserError(f"{source}: {key}: expected one value, got {value!r}")
        return [_parse_argument(parser, action, key, item, source) for item in value]
    if takes_list:
        if isinstance(value, str) and (str in admits or key in _STRING_FOR_A_LIST):
            return value  # a string of its own meaning
        raise UserError(f"{source}: {key}: expected a list, got {value!r} (write a list: [{value}])")
    return _parse_argument(parser, action, key, value, source)


def _parse_argument(parser: HfArgumentParser, action: argparse.Action, key: str, value: Any, source: str) -> Any:
    if isinstance(value, (list, dict)) or value is None:
        raise UserError(f"{source}: {key}: expected a list of values, got an item {value!r}")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    # Every key already in the namespace: the parser converts this one value, not every default of its dataclasses.
    namespace = argparse.Namespace(**{other.dest: None for other in parser._actions})
    try:  # `--key=value`: a value that starts with '-' stays a value
        parser.parse_known_args([f"--{key}={text}"], namespace)
    except argparse.ArgumentError as err:
        raise UserError(f"{source}: {key}: {err.message}") from None
    parsed = getattr(namespace, action.dest)
    return parsed[0] if action.nargs in ("+", "*") else parsed


def check_across_dataclasses(instances: tuple[Any, ...]) -> None:
    """The checks that join keys of two dataclasses, the one place for each (a key's own range and the checks
    within one dataclass are in its ``__post_init__``, finetune/configs.py): the rewards, ``reward_funcs`` of the
    script arguments and ``reward_weights`` of the config (:func:`check_reward_funcs`), and ``eval_backend: vllm``,
    which needs the config's colocated vLLM engine.

    Raises:
        UserError: one line naming the key, the value and what is expected.
    """
    values: dict[str, Any] = {}
    for instance in instances:
        values.update({f.name: getattr(instance, f.name) for f in fields(instance) if f.init})
    if "reward_funcs" in values:
        check_reward_funcs(values["reward_funcs"], values.get("reward_weights"))
    use_vllm = bool(values.get("use_vllm"))
    if values.get("eval_backend") == "vllm" and not (use_vllm and values.get("vllm_mode") == "colocate"):
        raise UserError(
            "eval_backend: vllm reuses the trainer's colocated vLLM engine, and this run has none "
            f"(use_vllm: {str(use_vllm).lower()}, vllm_mode: {values.get('vllm_mode')}); set eval_backend: auto or "
            "transformers, or use_vllm: true with vllm_mode: colocate"
        )


def check_reward_funcs(names: list[str], weights: list[float] | None) -> None:
    """The one check of a recipe's rewards: at least one, each registered (the closest name suggested) or an
    importable dotted path, and one ``reward_weights`` entry per reward when weights are given.

    Raises:
        UserError: one line naming ``reward_funcs`` or ``reward_weights``.
    """
    from rewards import REWARD_FUNCS, UnknownRewardError, get_reward_funcs

    if not names:
        raise UserError("reward_funcs: at least one reward function is required")
    for name in names:
        if "." not in name and name not in REWARD_FUNCS:
            suggestion = closest_key(name, set(REWARD_FUNCS))
            hint = f" (did you mean '{suggestion}'?)" if suggestion else f"; known: {', '.join(sorted(REWARD_FUNCS))}"
            raise UserError(f"reward_funcs: unknown reward '{name}'{hint}")
    try:
        get_reward_funcs(names)
    except UnknownRewardError as err:
        raise UserError(f"reward_funcs: {err}") from None
    if weights is not None and len(weights) != len(names):
        raise UserError(
            f"reward_weights: {len(weights)} weight(s) {list(weights)} "
            f"for {len(names)} reward function(s) {list(names)}; "
            "give one weight per reward function, in the same order"
        )


def check_benchmark_names(names: str | list[str], source: str) -> None:
    """Every benchmark name is registered, a preset (``general``) or a dotted path to a Benchmark that
    imports; ``name:N`` limits are allowed (:func:`eval_hooks.plan.parse_benchmark_list`, the eval plan's parser).

    Raises:
        UserError: ``"<source>: unknown benchmark 'x' (did you mean 'y'? ...)"``.
    """
    from eval_hooks.plan import parse_benchmark_list

    parse_benchmark_list(names, source)


def _raise_usage_error(source: str) -> Any:
    def error(message: str) -> NoReturn:
        raise UserError(f"{source}: {message}")

    return error


RECIPE_FLAGS = ("--config", "--recipe")  # TRL's TrlParser spelling and ours


def pop_recipe_path(args: list[str]) -> Path | None:
    """Take the recipe path out of ``args``: a leading ``RECIPE.yaml``, or ``--config PATH`` (TRL's
    ``TrlParser``, open-r1) or ``--recipe PATH`` anywhere (also as ``--flag=PATH``). Two recipes are an error."""
    found: list[str] = []
    if args and not args[0].startswith("-"):
        found.append(args.pop(0))
    index = 0
    while index < len(args):
        flag, eq, value = args[index].partition("=")
        if flag in RECIPE_FLAGS:
            if eq:
                args.pop(index)
            elif index + 1 < len(args) and not args[index + 1].startswith("--"):
                args.pop(index)
                value = args.pop(index)
            else:
                raise UserError(f"command line: {flag} needs a recipe path (e.g. {flag} recipes/qwen3vl_oric.yaml)")
            found.append(value)
            continue
        index += 1
    if len(found) > 1:
        raise UserError(
            f"command line: {len(found)} recipes given ({', '.join(found)}); give one (then --key value overrides)"
        )
    return Path(found[0]) if found else None


def check_machine(values: dict[str, Any]) -> None:
    """What the run needs of the machine it starts on, before the dataclasses are built (TrainingArguments
    refuses bf16 without a GPU in a line that names neither the key nor the way out): vLLM (installed, a GPU
    visible), then bf16 / fp16 without a GPU and without ``use_cpu``.

    Raises:
        UserError: one line naming the key and what to set instead.
    """
    from core.gpu import cuda_available
    from finetune.configs import require_generation_runtime

    require_generation_runtime(types.SimpleNamespace(**values))
    if cuda_available() or values.get("use_cpu"):
        return
    for key in ("bf16", "fp16", "bf16_full_eval", "fp16_full_eval"):
        if values.get(key):
            raise UserError(
                f"{key}: true needs a CUDA GPU and none is visible here (torch.cuda.is_available() is False); "
                f"on a CPU add --{key} false, or run on a GPU machine"
            )


def parse_recipe(argv: list[str], dataclass_types: tuple[type, ...], *, here: bool = False) -> tuple[Any, ...]:
    """Parse ``[RECIPE.yaml | --config RECIPE.yaml | --recipe RECIPE.yaml] [--key value ...]`` into one
    instance per dataclass type, as TRL's ``TrlParser`` does: the recipe sets the defaults, flags override
    them. Without a recipe, flags alone are used. ``here``: the run starts on this machine, so what it needs of
    the machine is checked first (:func:`check_machine`).

    Raises:
        UserError: missing or malformed recipe, unknown key or flag, or a value the dataclasses reject.
    """
    parser = recipe_parser(dataclass_types)
    args = list(argv)
    recipe: dict[str, Any] = {}
    recipe_path = pop_recipe_path(args)
    if recipe_path is not None:
        recipe = load_recipe(recipe_path, dataclass_types, parser)
    parser.set_defaults(**recipe)
    try:
        if here:
            namespace, _ = parser.parse_known_args(args=args)
            check_machine(vars(namespace))
        *instances, remaining = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
    except argparse.ArgumentError as err:  # a flag's value: the parser's words
        raise UserError(f"command line: {err}") from None
    except (ValueError, TypeError) as err:
        source = str(recipe_path) if recipe_path else "command line"
        raise UserError(f"{source}: {str(err).splitlines()[0]}") from None
    if recipe_path is not None and hasattr(instances[0], "recipe") and instances[0].recipe is None:
        instances[0].recipe = str(recipe_path)
    unknown = [a for a in remaining if a.startswith("--")]
    if unknown:
        raise UserError(_unknown_key_message("command line", unknown[0][2:].split("=")[0], valid_keys(dataclass_types)))
    if remaining:
        raise UserError(f"command line: unexpected argument '{remaining[0]}' (flags are --key value)")
    if recipe_path is not None:
        check_recipe_names_model(recipe_path, instances)
    check_across_dataclasses(tuple(instances))
    return tuple(instances)


def check_recipe_names_model(recipe_path: Path, instances: list[Any]) -> None:
    """A recipe run names its model (in the file, a base it includes, or ``--model_name_or_path``). The bases
    under recipes/base/ name none, so one run by mistake stops here, before anything loads.

    Raises:
        UserError: ``"<recipe>: model_name_or_path: required ..."``.
    """
    for instance in instances:
        if hasattr(instance, "model_name_or_path") and not instance.model_name_or_path:
            hint = ""
            if recipe_path.parent.name == "base":
                hint = f"; {recipe_path.parent} holds bases that recipes include (`include:`), not recipes to run"
            raise UserError(f"{recipe_path}: model_name_or_path: required (a Hub id or a local model directory{hint})")


def run_entry_script(main: Callable[..., None], dataclass_types: tuple[type, ...]) -> None:
    """An entry script's ``__main__``: parse ``sys.argv`` (recipe and overrides, :func:`parse_recipe`) into
    ``dataclass_types`` and run ``main`` on them; a user error is one ``error:`` line and exit code 2. Once parsed,
    a secret among the arguments (``--hub_token X``) is redacted in ``sys.argv``, which W&B records."""
    args = exit_on_user_error(parse_recipe)(sys.argv[1:], dataclass_types, here=True)
    sys.argv[1:] = redact_argv(sys.argv[1:])
    exit_on_user_error(main)(*args)
    leave_process_group()


def leave_process_group() -> None:
    """Under a multi-process launch, wait for every process, then close the process group, if it is still open.
    A run that trains closes it already (:func:`finetune.training.train_and_save`); one that stops before training,
    such as a finished run reported and not trained again, returned with it open. A process that exits with its
    gloo group open can abort in the group's threads ("terminate called without an active exception", SIGABRT),
    and its launcher then fails the run. The evaluator does the same (eval_hooks/cli.py)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def recipe_report_to(argv: list[str]) -> Any:
    """``report_to`` as an entry script would take it from ``argv`` (``[RECIPE.yaml] [--key value ...]``): the
    last ``--report_to`` flag (its values up to the next flag), else the recipe's key, else TrainingArguments'
    default ``"none"``. For launchers that check W&B before starting the script (``veritune launch``,
    ``veritune slurm submit``) without building its dataclasses."""
    args = list(argv)
    recipe_path = pop_recipe_path(args)
    value: Any = "none"
    if recipe_path is not None and recipe_path.suffix in (".yaml", ".yml") and recipe_path.is_file():
        value = read_recipe(recipe_path).get("report_to", value)
    index = 0
    while index < len(args):
        flag, eq, inline = args[index].partition("=")
        index += 1
        if flag != "--report_to":
            continue
        if eq:
            value = [inline]
            continue
        values = []
        while index < len(args) and not args[index].startswith("--"):
            values.append(args[index])
            index += 1
        value = values
    return value
