"""Every help string fits one line: each field veritune adds to a recipe dataclass, and each option of the
``veritune`` command line, says what it does (and its unit) in at most :data:`LIMIT` characters; the derivation
lives in the docs (docs/TRAINING.md, "Keys veritune adds"; docs/SCALING.md; docs/EVALUATION.md)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
from collections.abc import Iterator

import pytest
from transformers import TrainingArguments
from trl import DPOConfig, GRPOConfig, ModelConfig, SFTConfig

import finetune
from veritune.cli import build_parser

# One line of a help page: what the key does and its unit, not why (open-r1's median help is six words).
LIMIT = 100


def recipe_dataclasses() -> list[type]:
    """Every recipe dataclass defined in ``finetune/`` (configs.py, sft.py, ...): the script arguments and the
    subclasses of TRL's configs that the entry scripts parse a recipe into."""
    from finetune.configs import ScriptArguments

    found = []
    for module_info in pkgutil.iter_modules(finetune.__path__):
        module = importlib.import_module(f"finetune.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__module__ == module.__name__
                and issubclass(value, (ScriptArguments, ModelConfig, TrainingArguments))
            ):
                found.append(value)
    return sorted(set(found), key=lambda cls: cls.__qualname__)


def veritune_fields() -> Iterator[tuple[str, str, str | None]]:
    """``(class, field, help)`` for every field a recipe dataclass adds to TRL's (TRL's own are TRL's to word)."""
    trl_fields = {f.name for base in (DPOConfig, GRPOConfig, ModelConfig, SFTConfig) for f in dataclasses.fields(base)}
    for cls in recipe_dataclasses():
        for f in dataclasses.fields(cls):
            if f.name not in trl_fields and f.name in vars(cls).get("__annotations__", {}):  # declared here
                yield cls.__name__, f.name, f.metadata.get("help")


def cli_options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("veritune",)) -> Iterator[tuple[str, str]]:
    """``(command and option, help)`` for every option of every ``veritune`` command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from cli_options(child, (*path, name))
        elif action.help not in (None, argparse.SUPPRESS) and action.dest != "help":
            yield f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}", action.help


def test_the_walk_finds_the_recipe_dataclasses_and_the_commands() -> None:
    names = {cls.__name__ for cls in recipe_dataclasses()}
    assert {"ScriptArguments", "VerituneGRPOConfig", "VerituneDPOConfig", "SFTScriptArguments"} <= names
    keys = {name for _, name, _ in veritune_fields()}
    assert {"rollout_batch_prompts", "global_batch_size", "plugins", "vision_feature_cache"} <= keys
    options = dict(cli_options(build_parser()))
    assert "veritune eval run --benchmarks" in options and "veritune build oric --context-judge" in options


FIELDS = list(veritune_fields())


@pytest.mark.parametrize("cls, name, text", FIELDS, ids=[f"{cls}.{name}" for cls, name, _ in FIELDS])
def test_every_recipe_field_has_a_one_line_help(cls: str, name: str, text: str | None) -> None:
    assert text, f"{cls}.{name}: no help"
    assert "\n" not in text and len(text) <= LIMIT, f"{cls}.{name}: {len(text)} characters (at most {LIMIT}): {text}"


def test_every_command_line_option_has_a_one_line_help() -> None:
    long = [
        f"{where}: {len(text % {'default': ''})} characters"
        for where, text in cli_options(build_parser())
        if "\n" in text or len(text % {"default": ""}) > LIMIT
    ]
    assert not long, f"help strings over {LIMIT} characters: {long}"
