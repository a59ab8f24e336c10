"""A recipe file as every reader sees it: its ``include:`` bases merged in, and its relative paths resolved.

``include: base/oric_grpo.yaml`` (or a list of paths) names recipes whose keys this one starts from, as
lm-evaluation-harness task configs do: a path relative to the including file's folder (or absolute), read
before the including file's own keys, which override them; the bases of a list in order, each later one
overriding the earlier; an included file may include others. A missing base or an include cycle is one
line naming both files. Keys are not checked here (the entry point's dataclasses decide what is valid:
``finetune.recipe.load_recipe``, which names the file that set an unknown key). Every reader of a recipe
(the entry scripts, ``veritune launch``, ``veritune slurm submit`` and ``slurm/train.sbatch``, ``veritune
demo``, the model card) goes through :func:`load_recipe_file`. Nothing here imports TRL: the Slurm batch
script reads recipes with it in a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_yaml
from core.secrets import check_no_secrets

INCLUDE_KEY = "include"


@dataclass
class RecipeFile:
    """A recipe with its includes merged: ``values`` (no ``include`` key), the file that set each value
    (``sources``), and every file read, the recipe first (``files``)."""

    path: Path
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


def load_recipe_file(path: str | os.PathLike[str]) -> RecipeFile:
    """Read ``path`` and the recipes it includes, merged (module docstring).

    Raises:
        UserError: a file is missing, malformed or not a mapping; ``include`` is not a path or a list of
            paths; an included file does not exist; or the includes form a cycle.
    """
    recipe = RecipeFile(Path(path))
    _merge(recipe, Path(path), ())
    return recipe


def read_recipe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The recipe's values, its includes merged in (:func:`load_recipe_file`)."""
    return load_recipe_file(path).values


def _include_list(path: Path, value: Any) -> list[str]:
    paths = value if isinstance(value, list) else [value]
    if not paths or not all(isinstance(item, str) and item.strip() for item in paths):
        raise UserError(f"{path}: {INCLUDE_KEY}: expected a recipe path or a list of recipe paths, got {value!r}")
    return paths


def _merge(recipe: RecipeFile, path: Path, including: tuple[Path, ...]) -> None:
    """Merge ``path`` (included through the files of ``including``, outermost first) into ``recipe``."""
    own = read_yaml(path, what="recipe file")
    check_no_secrets(own, str(path))  # a secret goes in the environment: the recipe is copied into every record
    if path not in recipe.files:
        recipe.files.append(path)
    if INCLUDE_KEY in own:
        chain = (*including, path)
        for written in _include_list(path, own.pop(INCLUDE_KEY)):
            base = Path(written) if Path(written).is_absolute() else path.parent / written
            if not base.is_file():
                raise UserError(f"{path}: {INCLUDE_KEY}: {written} not found (no file {base})")
            resolved = [step.resolve() for step in chain]
            if base.resolve() in resolved:
                cycle = " -> ".join(str(step) for step in (*chain[resolved.index(base.resolve()) :], base))
                raise UserError(f"{path}: {INCLUDE_KEY}: {written} is already being included (include cycle: {cycle})")
            _merge(recipe, base, chain)
    recipe.values.update(own)
    recipe.sources.update(dict.fromkeys(own, path))


# ---------------------------------------------------------------------------------------------- recipe paths
#
# One rule for a relative path written in a recipe file, whoever reads it (the entry scripts, `veritune slurm
# submit`, `veritune demo`; docs/DATA_FORMATS.md, "Paths in recipes"): it is looked up in the current
# directory, then in the repository of the file that writes it (the nearest folder above it holding
# pyproject.toml or .git), then in that file's own folder; the first place that has it wins (the current
# directory keeps the path as written). A path written in an included base resolves against the base, so a
# base works from wherever it is included. A path found nowhere is kept as written (an output to be made
# there, or a hub id), except for keys that must exist (accelerate_config), where the error lists every place
# looked in.

RECIPE_PATH_KEYS = (
    "accelerate_config",
    "model_name_or_path",
    "dataset_path",
    "image_root",
    "multi_image_path",
    "multi_image_root",
    "eval_data_root",
    "eval_image_root",
)
REQUIRED_PATH_KEYS = ("accelerate_config",)


def recipe_repository(recipe: str | os.PathLike[str]) -> Path | None:
    """The repository a recipe file belongs to: the nearest folder above it holding pyproject.toml or .git."""
    for folder in Path(recipe).resolve().parents:
        if (folder / "pyproject.toml").is_file() or (folder / ".git").exists():
            return folder
    return None


def recipe_path_candidates(recipe: str | os.PathLike[str], value: str) -> list[Path]:
    """Where a relative path ``value`` of ``recipe`` is looked for, in order (see the rule above)."""
    places = [Path(value)]
    repository = recipe_repository(recipe)
    if repository is not None:
        places.append(repository / value)
    places.append(Path(recipe).resolve().parent / value)
    unique: list[Path] = []
    for place in places:
        if place not in unique:
            unique.append(place)
    return unique


def resolve_recipe_path(recipe: str | os.PathLike[str], value: str, *, key: str, required: bool = False) -> str:
    """``value`` of the recipe key ``key``, written in the file ``recipe``, as a path that works from the
    current directory: unchanged when it is absolute or exists here, else the first of
    :func:`recipe_path_candidates` that exists.

    Raises:
        UserError: ``required`` and the path exists nowhere (the message lists where it looked).
    """
    if Path(value).is_absolute():
        if required and not Path(value).exists():
            raise UserError(f"{recipe}: {key}: {value} does not exist")
        return value
    candidates = recipe_path_candidates(recipe, value)
    for place in candidates:
        if place.exists():
            return value if place == Path(value) else str(place)
    if required:
        looked = ", ".join(str(place if place.is_absolute() else Path.cwd() / place) for place in candidates)
        hint = ""
        if key == "accelerate_config":  # a recipe copied out of the repository, its config left behind
            hint = (
                "; write the config's full path there, or drop the key and name the config when launching "
                "(veritune launch --config_file PATH ...)"
            )
        raise UserError(f"{recipe}: {key}: {value} does not exist (looked in: {looked}){hint}")
    return value


def resolve_recipe_paths(recipe: RecipeFile) -> dict[str, Any]:
    """``recipe``'s values with each :data:`RECIPE_PATH_KEYS` value resolved against the file that set it.

    Raises:
        UserError: an ``accelerate_config`` that exists nowhere (naming that file).
    """
    values = dict(recipe.values)
    for key in RECIPE_PATH_KEYS:
        if isinstance(values.get(key), str) and values[key]:
            values[key] = resolve_recipe_path(
                recipe.sources[key], values[key], key=key, required=key in REQUIRED_PATH_KEYS
            )
    return values


def recipe_path_value(recipe: str | os.PathLike[str], key: str) -> str | None:
    """The path key ``key`` of the recipe file ``recipe`` (its includes merged), resolved as the entry scripts
    resolve it; None when the recipe does not set it.

    Raises:
        UserError: the recipe cannot be read, or a required path (``accelerate_config``) exists nowhere.
    """
    loaded = load_recipe_file(recipe)
    value = loaded.values.get(key)
    if not isinstance(value, str) or not value:
        return None
    return resolve_recipe_path(loaded.sources[key], value, key=key, required=key in REQUIRED_PATH_KEYS)
