"""Every recipe in recipes/ parses to the settings recorded in tests/fixtures/recipe_settings.json.

The fixture was written from the flat recipes, before they were rewritten to include shared bases, so a
rewrite that changes any value, or any value's spelling that reaches the dataclasses, fails here. It records,
per recipe, the recipe as loaded (the keys it sets, its paths resolved from the repository root and from
another directory) and every field of the three dataclasses it parses into. A deliberate change of settings
rewrites the fixture:

    python tests/test_recipe_settings.py --write
"""

from __future__ import annotations

import enum
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "recipe_settings.json"
# The runnable recipes, named relative to recipes/ (recipes/base/ holds the shared bases, which are not run on
# their own; recipes/miniature/ the CPU miniature's).
RECIPES = sorted(
    str(path.relative_to(REPO_ROOT / "recipes"))
    for path in [*(REPO_ROOT / "recipes").glob("*.yaml"), *(REPO_ROOT / "recipes" / "miniature").glob("*.yaml")]
)


def recipe_types(name: str) -> tuple[type, ...]:
    """The dataclasses of the entry script a recipe is written for (its name says which)."""
    from finetune.configs import (
        DPOScriptArguments,
        GRPOScriptArguments,
        VerituneDPOConfig,
        VerituneGRPOConfig,
        VerituneModelConfig,
    )

    if ("oric" in name or "mioh" in name) and "_sft_" not in name:
        return GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    if "finer" in name:
        return DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
    from trl import SFTConfig

    from finetune.sft import SFTScriptArguments

    return SFTScriptArguments, SFTConfig, VerituneModelConfig


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def recipe_settings(name: str, elsewhere: Path) -> dict[str, Any]:
    """What ``recipes/<name>`` parses to: the loaded recipe (from the repository root, and from ``elsewhere``:
    the repository's path written ``<repo>`` for the paths that must exist, dropped from the others, which
    resolve there only when this checkout holds their data) and every dataclass field, as the entry script
    parses it on one CPU process."""
    from core.recipe_file import REQUIRED_PATH_KEYS
    from finetune.recipe import load_recipe, parse_recipe

    types = recipe_types(name)
    recipe = Path("recipes") / name
    os.chdir(REPO_ROOT)
    loaded = load_recipe(recipe, types)
    parsed = parse_recipe([str(recipe), "--use_cpu", "true"], types)
    os.chdir(elsewhere)
    from_elsewhere = load_recipe(REPO_ROOT / recipe, types)
    os.chdir(REPO_ROOT)
    for key, value in from_elsewhere.items():  # <repo>/KEY_PATH for the paths that must exist
        if isinstance(value, str) and value.startswith(f"{REPO_ROOT}{os.sep}"):
            relative = value[len(str(REPO_ROOT)) + 1 :]
            from_elsewhere[key] = f"<repo>/{relative}" if key in REQUIRED_PATH_KEYS else relative
    return {
        "recipe": _jsonable(loaded),
        "recipe_from_elsewhere": _jsonable(from_elsewhere),
        "parsed": {
            type(instance).__name__: {f.name: _jsonable(getattr(instance, f.name)) for f in fields(instance)}
            for instance in parsed
        },
    }


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_every_recipe(recorded: dict[str, Any]) -> None:
    assert sorted(recorded) == RECIPES


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_parses_to_its_recorded_settings(
    name: str, recorded: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.chdir(REPO_ROOT)
    settings = recipe_settings(name, tmp_path)
    expected = recorded[name]
    assert settings["recipe"] == expected["recipe"]
    assert settings["recipe_from_elsewhere"] == expected["recipe_from_elsewhere"]
    for cls, values in expected["parsed"].items():
        differs = {key: (settings["parsed"][cls].get(key), value) for key, value in values.items()}
        differs = {key: pair for key, pair in differs.items() if pair[0] != pair[1]}
        assert not differs, f"{name}: {cls} fields differ (now, recorded): {differs}"
        assert set(settings["parsed"][cls]) == set(values), name


def write_fixture() -> None:
    """Record every recipe's settings as the recipes parse now."""
    import tempfile

    from core.io import atomic_write_text

    os.environ.pop("WORLD_SIZE", None)
    with tempfile.TemporaryDirectory() as elsewhere:
        settings = {name: recipe_settings(name, Path(elsewhere)) for name in RECIPES}
    atomic_write_text(FIXTURE, json.dumps(settings, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE} ({len(settings)} recipes)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_recipe_settings.py --write")
    write_fixture()
