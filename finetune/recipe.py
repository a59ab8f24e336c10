"""Recipe parsing: ``script.py RECIPE.yaml [--key value ...]`` into TRL-style dataclasses.

A recipe is flat YAML, one key per dataclass field, which may start from shared bases (``include:``,
:mod:`core.recipe_file`). Command-line flags override recipe keys. A key or flag that no dataclass
knows is a one-line error naming the file that set it and the closest valid key.

Where a recipe is checked, all before any model loads (:func:`parse_recipe`): a value's type
(:func:`check_value_types`); what one field alone allows, in the dataclass that owns it (``__post_init__`` of
``finetune/configs.py``, and TRL's own); the ranges every recipe type shares (``_LOWER_BOUNDS``) and what
spans several keys or dataclasses (the rewards, :func:`check_reward_funcs`; vLLM; eval benchmarks) in
:func:`check_recipe_values`. The entry scripts check only that the data paths they need are given.
"""

from __future__ import annotations

import difflib
import enum
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


def load_recipe(path: str | os.PathLike[str], dataclass_types: tuple[type, ...]) -> dict[str, Any]:
    """Read a recipe with its ``include:`` bases merged (:func:`core.recipe_file.load_recipe_file`) and
    check every key against the dataclasses' fields and every value against its type, each error naming the
    file that set the key; its relative paths are resolved against that file
    (:func:`core.recipe_file.resolve_recipe_paths`)."""
    recipe = load_recipe_file(path)
    keys = valid_keys(dataclass_types)
    for key, source in recipe.sources.items():
        if key not in keys:
            raise UserError(_unknown_key_message(str(source), str(key), keys))
    for source in dict.fromkeys(recipe.sources.values()):
        own = {key: value for key, value in recipe.values.items() if recipe.sources[key] == source}
        check_value_types(own, dataclass_types, str(source))
    return resolve_recipe_paths(recipe)


# ---------------------------------------------------------------------------------------------- value checks
#
# Recipe values are checked here, before any model loads, so that a wrong value is one line naming the
# key, the value and what is expected, never a traceback from inside TRL or a wall of argparse usage.

# List keys whose bare string means something of its own (PEFT: "all-linear" or a regex of module names).
_STRING_FOR_A_LIST = {"lora_target_modules"}
_BOOL_WORDS = {"true", "false", "yes", "no", "1", "0", "y", "n", "t", "f"}


def _field_types(dataclass_types: tuple[type, ...]) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for cls in dataclass_types:
        try:
            resolved = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - a type we cannot resolve is left to the parser
            continue
        hints.update({f.name: resolved[f.name] for f in fields(cls) if f.init and f.name in resolved})
    return hints


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(arg) for arg in args))
    if origin is list:
        return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
    if origin is typing.Literal:
        return " or ".join(repr(arg) for arg in args)
    names = {
        type(None): "null",
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        dict: "a mapping",
    }
    if tp in names:
        return names[tp]
    return "a string" if isinstance(tp, type) and issubclass(tp, enum.Enum) else getattr(tp, "__name__", str(tp))


def _accepts(tp: Any, value: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_accepts(args[0], v) for v in value) if args else isinstance(value, list)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if origin is typing.Literal:
        return value in args
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool) or (isinstance(value, (str, int)) and str(value).lower() in _BOOL_WORDS)
    if tp is int:
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.strip().lstrip("+-").isdigit()
        )
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        try:
            return isinstance(value, str) and float(value) == float(value)  # NaN is no learning rate
        except ValueError:
            return False
    if tp is str or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return True  # a type the parser knows better (a config object, Any): left to it


def check_value_types(values: dict[str, Any], dataclass_types: tuple[type, ...], source: str) -> None:
    """Each value's type against its field's (a list where an integer goes, a string where a list goes, a
    word where a number goes).

    Raises:
        UserError: ``"<source>: <key>: expected <type>, got <value>"``.
    """
    hints = _field_types(dataclass_types)
    for key, value in values.items():
        tp = hints.get(key)
        if tp is None or _accepts(tp, value) or (key in _STRING_FOR_A_LIST and isinstance(value, str)):
            continue
        hint = ""
        if isinstance(value, str) and _accepts(tp, [value]):
            hint = f" (write a list: [{value}])"
        raise UserError(f"{source}: {key}: expected {_describe(tp)}, got {value!r}{hint}")


# (key, lowest allowed, whether the lowest is excluded): numbers a run cannot start with otherwise.
_LOWER_BOUNDS: tuple[tuple[str, float, bool], ...] = (
    ("learning_rate", 0.0, False),
    ("weight_decay", 0.0, False),
    ("max_grad_norm", 0.0, False),
    ("beta", 0.0, False),
    ("warmup_ratio", 0.0, False),
    ("num_train_epochs", 0.0, False),
    ("per_device_train_batch_size", 1, False),
    ("per_device_eval_batch_size", 1, False),
    ("gradient_accumulation_steps", 1, False),
    ("num_generations", 2, False),
    ("max_completion_length", 1, False),
    ("save_steps", 0.0, True),
    ("logging_steps", 0.0, True),
    ("eval_batch_size", 1, False),
    ("eval_limit", 1, False),
    ("temperature", 0.0, False),
)


def check_recipe_values(instances: tuple[Any, ...]) -> None:
    """Ranges and cross-key checks of a parsed recipe, before any model loads: negative learning rates and
    batch sizes, ``reward_weights`` of another length than ``reward_funcs``, unknown reward functions, and the
    eval plan (:meth:`eval_hooks.plan.EvalPlan.of`: unknown eval benchmarks with the closest valid name, ``NAME:N``
    limits, ``eval_data``), parsed here once for the run.

    Raises:
        UserError: one line naming the key, the value and what is expected.
    """
    values: dict[str, Any] = {}
    for instance in instances:
        values.update({f.name: getattr(instance, f.name) for f in fields(instance) if f.init})
    for key, lowest, exclusive in _LOWER_BOUNDS:
        value = values.get(key)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (value <= lowest if exclusive else value < lowest)
        ):
            bound = f"greater than {lowest:g}" if exclusive else f"at least {lowest:g}"
            raise UserError(f"{key}: must be {bound}, got {value}")
    if "reward_funcs" in values:
        check_reward_funcs(values["reward_funcs"], values.get("reward_weights"))
    for instance in instances:
        if hasattr(instance, "eval_benchmarks"):  # the eval plan: benchmark lists, limits, eval_data (one parser)
            from eval_hooks.plan import EvalPlan

            EvalPlan.of(instance)
    if values.get("dataloader_persistent_workers") and values.get("dataloader_num_workers") == 0:
        raise UserError(  # else torch's DataLoader raises it as a traceback once the model is loaded
            "dataloader_persistent_workers: true needs dataloader_num_workers of 1 or more, got 0 "
            "(with --dataloader_num_workers 0 also pass --dataloader_persistent_workers false)"
        )
    _check_vllm(values)


def _check_vllm(values: dict[str, Any]) -> None:
    """vLLM settings that TRL would only refuse after the model has loaded, or not at all."""
    use_vllm = bool(values.get("use_vllm"))
    if use_vllm and values.get("vllm_mode") not in ("colocate", "server"):
        raise UserError(f"vllm_mode: expected colocate or server, got {values.get('vllm_mode')!r}")
    if use_vllm and values.get("ds3_gather_for_generation") is False:
        raise UserError(
            "ds3_gather_for_generation: false cannot be used with use_vllm (TRL pushes gathered weights to vLLM); "
            "set it to true, or use_vllm: false"
        )
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
    parser = HfArgumentParser(dataclass_types)
    parser.allow_abbrev = False  # `--learning_rat` must be an error, not a silent prefix match
    parser.error = _raise_usage_error("command line")  # one line, not argparse's page of usage
    args = list(argv)
    recipe: dict[str, Any] = {}
    recipe_path = pop_recipe_path(args)
    if recipe_path is not None:
        recipe = load_recipe(recipe_path, dataclass_types)
    parser.set_defaults(**recipe)
    if here:
        namespace, _ = parser.parse_known_args(args=args)
        check_machine(vars(namespace))
    try:
        *instances, remaining = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
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
    check_recipe_values(tuple(instances))
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
