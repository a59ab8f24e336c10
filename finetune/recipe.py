"""Recipe parsing: ``script.py RECIPE.yaml [--key value ...]`` into TRL-style dataclasses.

A recipe is flat YAML, one key per dataclass field. Command-line flags override recipe keys. A key or
flag that no dataclass knows is a one-line error naming the closest valid key.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

from veritune.errors import UserError
from veritune.io import read_yaml


def valid_keys(dataclass_types: tuple[type, ...]) -> set[str]:
    """Every key a recipe for these dataclasses may set."""
    return {f.name for cls in dataclass_types for f in fields(cls) if f.init}


def closest_key(key: str, keys: set[str]) -> str | None:
    """The valid key most like ``key``, or None when nothing is close."""
    matches = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_key_message(source: str, key: str, keys: set[str]) -> str:
    suggestion = closest_key(key, keys)
    hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
    return f"{source}: unknown key '{key}'{hint}"


def load_recipe(path: str | os.PathLike[str], dataclass_types: tuple[type, ...]) -> dict[str, Any]:
    """Read a recipe and check every key against the dataclasses' fields."""
    recipe = read_yaml(path, what="recipe file")
    keys = valid_keys(dataclass_types)
    for key in recipe:
        if key not in keys:
            raise UserError(_unknown_key_message(str(path), str(key), keys))
    return recipe


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
        raise UserError(f"command line: {len(found)} recipes given ({', '.join(found)}); give one (then --key value overrides)")
    return Path(found[0]) if found else None


def parse_recipe(argv: list[str], dataclass_types: tuple[type, ...]) -> tuple[Any, ...]:
    """Parse ``[RECIPE.yaml | --config RECIPE.yaml | --recipe RECIPE.yaml] [--key value ...]`` into one
    instance per dataclass type, as TRL's ``TrlParser`` does: the recipe sets the defaults, flags override
    them. Without a recipe, flags alone are used.

    Raises:
        UserError: missing or malformed recipe, unknown key or flag, or a value the dataclasses reject.
    """
    parser = HfArgumentParser(dataclass_types)
    parser.allow_abbrev = False  # `--learning_rat` must be an error, not a silent prefix match
    args = list(argv)
    recipe: dict[str, Any] = {}
    recipe_path = pop_recipe_path(args)
    if recipe_path is not None:
        recipe = load_recipe(recipe_path, dataclass_types)
    parser.set_defaults(**recipe)
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
    return tuple(instances)
