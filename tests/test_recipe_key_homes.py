"""Every recipe key has one home: its type from its dataclass field, read by the parser as the same ``--key value``
flag is, and its range in the ``__post_init__`` of the dataclass that owns it, written once.

The dataclasses walked are those of every entry script (``veritune.launch.ENTRY_SCRIPTS``: GRPO, DPO, SFT).
"""

from __future__ import annotations

import argparse
import logging
from collections import defaultdict
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from core.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY_SCRIPTS = ("grpo.py", "dpo.py", "sft.py")
# Keys a range or choice check refuses a bad value of (found by probing below; one that disappears fails here).
RANGE_CHECKED = {
    "learning_rate", "weight_decay", "max_grad_norm", "num_train_epochs", "beta",
    "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
    "save_steps", "logging_steps", "num_generations", "max_completion_length", "temperature",
    "eval_batch_size", "eval_limit", "max_pixels", "max_pixels_per_image", "max_train_samples",
    "replay_ratio", "multi_image_ratio", "validation_ratio", "dynamic_sampling_min_std",
    "dynamic_sampling_max_rounds", "no_spread_warning_steps", "decode_prompt_bucket",
}  # fmt: skip


def entry_types(script: str) -> tuple[type, ...]:
    from veritune.launch import entry_dataclasses

    types = entry_dataclasses(str(REPO_ROOT / "finetune" / script))
    assert types is not None, script
    return types


def flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each key's own flag (``--key``, not its ``--no_key`` complement)."""
    return {action.dest: action for action in parser._actions if f"--{action.dest}" in action.option_strings}


def parser_message(parser: argparse.ArgumentParser, key: str, text: str) -> str | None:
    """What the parser says of ``--key=text``; None when it takes it."""
    try:
        parser.parse_known_args([f"--{key}={text}"])
    except argparse.ArgumentError as err:
        return err.message
    return None


@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_a_recipe_value_is_read_by_the_parser_as_its_flag_is(script: str, tmp_path: Path) -> None:
    """For every key of the entry script: a value the parser refuses as ``--key=value`` is refused in a recipe
    with the parser's own words, in one line naming the file and the key; a value it takes, the recipe takes."""
    from core.recipe_file import REQUIRED_PATH_KEYS
    from core.secrets import secret_keys
    from finetune.recipe import load_recipe, recipe_parser, valid_keys

    types = entry_types(script)
    parser = recipe_parser(types)
    refused = 0
    actions = flag_actions(parser)
    for key in sorted(valid_keys(types)):
        action = actions[key]
        takes_list = action.nargs in ("+", "*")
        recipe = tmp_path / f"{key}.yaml"
        recipe.write_text(f"{key}: {'[not-a-value]' if takes_list else 'not-a-value'}\n")
        message = parser_message(parser, key, "not-a-value")
        if message is None:
            if key not in REQUIRED_PATH_KEYS and not secret_keys({key: "x"}):  # a path that must exist, a secret
                load_recipe(recipe, types, parser)
            continue
        with pytest.raises(UserError) as info:
            load_recipe(recipe, types, parser)
        assert str(info.value) == f"{recipe}: {key}: {message}"
        refused += 1
    assert refused > 50  # the numbers, switches and choices of TRL's configs and ours


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_steps: [1, 2]", "max_steps: expected one value, got [1, 2]"),
        ("reward_funcs: accuracy", "reward_funcs: expected a list, got 'accuracy' (write a list: [accuracy])"),
        ("learning_rate:", "learning_rate: expected a value, got null (leave the key out for its default)"),
        ("max_steps: {a: 1}", "max_steps: expected one value, got {'a': 1}"),
    ],
    ids=["list-for-one-value", "string-for-a-list", "null-for-a-number", "mapping-for-a-number"],
)
def test_what_only_yaml_can_write_is_refused_where_the_field_takes_none(
    text: str, message: str, tmp_path: Path
) -> None:
    from finetune.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(text + "\n")
    with pytest.raises(UserError) as info:
        load_recipe(recipe, entry_types("grpo.py"))
    assert str(info.value) == f"{recipe}: {message}"


def test_what_only_yaml_can_write_is_taken_where_the_field_declares_it(tmp_path: Path) -> None:
    from finetune.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "report_to: [none]\nmodel_init_kwargs: {low_cpu_mem_usage: true}\nmax_prompt_length:\n"
        "lora_target_modules: all-linear\nreward_weights: [-1.0e-5, 1]\nnum_train_epochs: 2\n"
    )
    loaded = load_recipe(recipe, entry_types("grpo.py"))
    assert loaded == {
        "report_to": ["none"],
        "model_init_kwargs": {"low_cpu_mem_usage": True},
        "max_prompt_length": None,
        "lora_target_modules": "all-linear",  # PEFT's own meaning of a bare string
        "reward_weights": [-1e-5, 1.0],  # a negative value stays a value (`--reward_weights=-1e-05`)
        "num_train_epochs": 2.0,  # as `--num_train_epochs 2` reads
    }


def _check_site(err: UserError) -> tuple[str, str]:
    """The file and function that refused: the caller of :func:`finetune.configs.require_at_least`, if it was."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    while frames[-1].f_code.co_name == "require_at_least":
        frames.pop()
    code = frames[-1].f_code
    return str(Path(code.co_filename).resolve().relative_to(REPO_ROOT)), code.co_qualname


def _probe_values(action: argparse.Action) -> list[object]:
    return [-1, 0] if action.type in (int, float) and action.nargs is None else []


def test_each_range_is_checked_once_in_the_dataclass_that_owns_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build each dataclass of every entry script with a bad number in one key at a time (-1, 0): the keys refused
    are refused by one function each, whichever entry script's dataclass holds the key, a method of one of our
    dataclasses in finetune/configs.py (none in the recipe parser), and of a class the refusing dataclass is."""
    from finetune.recipe import recipe_parser

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    logging.getLogger("veritune").setLevel(logging.ERROR)  # the accumulation notes
    sites: dict[str, set[tuple[str, str]]] = defaultdict(set)
    owners: dict[str, set[type]] = defaultdict(set)
    for script in ENTRY_SCRIPTS:
        types = entry_types(script)
        actions = flag_actions(recipe_parser(types))
        for cls in types:
            for f in fields(cls):
                if not f.init or f.name not in actions or f.default is MISSING:
                    continue
                for value in _probe_values(actions[f.name]):
                    try:
                        cls(**{f.name: value})
                    except UserError as err:
                        if str(err).startswith(f"{f.name}:"):
                            sites[f.name].add(_check_site(err))
                            owners[f.name].add(cls)
                    except Exception:  # noqa: BLE001, S112 - TRL's own checks, and values TRL cannot take
                        continue
    assert RANGE_CHECKED <= set(sites), sorted(RANGE_CHECKED - set(sites))
    for key, found in sites.items():
        assert len(found) == 1, f"{key} is checked in {len(found)} places: {sorted(found)}"
        path, function = next(iter(found))
        assert path == "finetune/configs.py", (key, path, function)
        home = function.split(".")[0]
        assert all(home in {base.__name__ for base in cls.__mro__} for cls in owners[key]), (key, function)


@pytest.mark.parametrize(
    ("flags", "site"),
    [
        (["--learning_rate", "-1"], "TrainingArgumentsChecks.check_training_arguments"),
        (["--num_generations", "1"], "VerituneGRPOConfig.__post_init__"),
        (["--eval_limit", "0"], "ScriptArguments.__post_init__"),
        (["--max_pixels", "0"], "ScriptArguments.__post_init__"),
    ],
    ids=["trl-key", "grpo-key", "eval-key", "our-key"],
)
def test_a_parsed_recipe_is_refused_by_the_same_check(flags: list[str], site: str) -> None:
    from finetune.recipe import parse_recipe

    recipe = str(REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml")
    with pytest.raises(UserError) as info:
        parse_recipe([recipe, *flags], entry_types("grpo.py"))
    assert _check_site(info.value) == ("finetune/configs.py", site)


def test_the_recipe_parser_holds_no_type_or_range_of_its_own() -> None:
    """finetune/recipe.py reads values with the parser and checks only what joins two dataclasses."""
    source = (REPO_ROOT / "finetune" / "recipe.py").read_text(encoding="utf-8")
    for name in ("_LOWER_BOUNDS", "check_value_types", "_accepts", "_describe", "_field_types", "must be at least"):
        assert name not in source, name
