"""``include:`` in recipes: bases merged before the keys are checked, errors naming the files, every reader of a
recipe seeing the merged one, and the bases under recipes/base/ refused as runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from core.errors import UserError, exit_on_user_error
from core.recipe_file import load_recipe_file, read_recipe
from finetune.configs import (
    DPOScriptArguments,
    GRPOScriptArguments,
    VerituneDPOConfig,
    VerituneGRPOConfig,
    VerituneModelConfig,
)
from finetune.recipe import load_recipe, parse_recipe

GRPO_TYPES = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
DPO_TYPES = (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
BASES = sorted((REPO_ROOT / "recipes" / "base").glob("*.yaml"))
TINY = REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_bases_merge_in_order_and_the_including_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "bases" / "root.yaml", "seed: 1\nlearning_rate: 1.0e-3\nnum_generations: 4\n")
    write(tmp_path / "bases" / "sub" / "lr.yaml", "include: ../root.yaml\nlearning_rate: 2.0e-3\nbeta: 0.5\n")
    write(tmp_path / "bases" / "beta.yaml", "beta: 0.25\n")
    recipe = write(tmp_path / "recipe.yaml", "include: [bases/sub/lr.yaml, bases/beta.yaml]\nseed: 3\n")
    monkeypatch.chdir(REPO_ROOT)  # include paths are relative to the including file, not the current directory
    loaded = load_recipe_file(recipe)
    assert loaded.values == {"seed": 3, "learning_rate": 2.0e-3, "num_generations": 4, "beta": 0.25}
    assert loaded.sources["learning_rate"] == tmp_path / "bases" / "sub" / "lr.yaml"
    assert loaded.sources["beta"] == tmp_path / "bases" / "beta.yaml"
    assert loaded.sources["seed"] == recipe
    assert loaded.files == [
        recipe,
        tmp_path / "bases" / "sub" / "lr.yaml",
        tmp_path / "bases" / "sub" / "../root.yaml",
        tmp_path / "bases" / "beta.yaml",
    ]


def test_a_base_included_twice_is_no_cycle(tmp_path: Path) -> None:
    write(tmp_path / "root.yaml", "seed: 1\n")
    write(tmp_path / "a.yaml", "include: root.yaml\nbeta: 0.1\n")
    write(tmp_path / "b.yaml", "include: root.yaml\nepsilon: 0.3\n")
    recipe = write(tmp_path / "r.yaml", "include: [a.yaml, b.yaml]\n")
    assert read_recipe(recipe) == {"seed": 1, "beta": 0.1, "epsilon": 0.3}


def test_the_variant_overrides_the_base_on_the_command_line_too() -> None:
    _, args, model_args = parse_recipe(
        [str(REPO_ROOT / "recipes/qwen3vl_oric_lora_vllm.yaml"), "--use_cpu", "true", "--learning_rate", "1e-6"],
        GRPO_TYPES,
    )
    assert args.learning_rate == 1e-6  # flag over the LoRA recipe's 2e-5 over the base's 2e-6
    assert model_args.use_peft and args.use_vllm  # from the included LoRA recipe, and its own


def run_parse(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The entry script's parse of ``argv``: exit 2 and one ``error:`` line; returns the line."""
    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(parse_recipe)(argv, GRPO_TYPES)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_missing_base_names_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write(tmp_path / "r.yaml", "include: base/nope.yaml\nseed: 1\n")
    assert run_parse([str(recipe)], capsys) == (
        f"error: {recipe}: include: base/nope.yaml not found (no file {tmp_path / 'base' / 'nope.yaml'})"
    )


def test_an_include_cycle_names_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.yaml", "include: b.yaml\nseed: 1\n")
    b = write(tmp_path / "b.yaml", "include: a.yaml\nbeta: 0.1\n")
    assert run_parse([str(a)], capsys) == (
        f"error: {b}: include: a.yaml is already being included (include cycle: {a} -> {b} -> {tmp_path / 'a.yaml'})"
    )


def test_a_recipe_including_itself_is_a_cycle(tmp_path: Path) -> None:
    recipe = write(tmp_path / "r.yaml", "include: ./r.yaml\n")
    with pytest.raises(UserError, match=r"r\.yaml: include: \./r\.yaml is already being included \(include cycle"):
        load_recipe_file(recipe)


@pytest.mark.parametrize("value", ["[]", "3", '""', "[base.yaml, 4]"])
def test_include_must_be_a_path_or_a_list_of_paths(tmp_path: Path, value: str) -> None:
    recipe = write(tmp_path / "r.yaml", f"include: {value}\n")
    with pytest.raises(UserError, match=r"r\.yaml: include: expected a recipe path or a list of recipe paths, got"):
        load_recipe_file(recipe)


def test_an_unknown_key_in_a_base_names_the_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path / "base" / "b.yaml", "learning_rat: 1.0e-5\n")
    recipe = write(tmp_path / "r.yaml", "include: base/b.yaml\nseed: 1\n")
    assert run_parse([str(recipe)], capsys) == (
        f"error: {base}: unknown key 'learning_rat' (did you mean 'learning_rate'?)"
    )


def test_a_wrong_value_in_a_base_names_the_base(tmp_path: Path) -> None:
    base = write(tmp_path / "b.yaml", "seed: 1\nnum_generations: eight\n")
    recipe = write(tmp_path / "r.yaml", "include: b.yaml\nlearning_rate: 1.0e-5\n")
    with pytest.raises(UserError, match=rf"^{base}: num_generations: invalid int value: 'eight'$"):
        load_recipe(recipe, GRPO_TYPES)


def test_a_bad_base_file_is_named(tmp_path: Path) -> None:
    base = write(tmp_path / "b.yaml", "seed: [1\n")
    recipe = write(tmp_path / "r.yaml", "include: b.yaml\n")
    with pytest.raises(UserError, match=rf"^{base}: not valid YAML"):
        load_recipe_file(recipe)


def test_a_path_in_a_base_resolves_against_the_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A base's relative path is looked up from the base's repository and folder, so it works from wherever it
    is included; the including recipe's own paths keep their rule."""
    write(tmp_path / "bases" / "accelerate.yaml", "distributed_type: NO\n")
    write(tmp_path / "bases" / "b.yaml", "accelerate_config: accelerate.yaml\nseed: 1\n")
    recipe = write(tmp_path / "mine" / "r.yaml", "include: ../bases/b.yaml\nmodel_name_or_path: m\n")
    monkeypatch.chdir(tmp_path / "mine")
    assert load_recipe(recipe, GRPO_TYPES)["accelerate_config"] == str(tmp_path / "bases" / "accelerate.yaml")
    (tmp_path / "bases" / "accelerate.yaml").unlink()
    base = tmp_path / "mine" / "../bases/b.yaml"  # the file that sets it, as included
    with pytest.raises(UserError, match=rf"^{base}: accelerate_config: accelerate.yaml does not exist \(looked in: "):
        load_recipe(recipe, GRPO_TYPES)


def test_the_repositorys_base_works_from_a_recipe_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = write(
        tmp_path / "r.yaml",
        f"include: {REPO_ROOT / 'recipes/base/oric_grpo.yaml'}\nmodel_name_or_path: m\noutput_dir: out\n",
    )
    monkeypatch.chdir(tmp_path)
    assert load_recipe(recipe, GRPO_TYPES)["accelerate_config"] == str(REPO_ROOT / "recipes/accelerate/zero3.yaml")


@pytest.mark.parametrize("base", BASES, ids=lambda p: p.name)
def test_a_base_is_not_a_recipe_to_run(base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert {"model_name_or_path", "output_dir"}.isdisjoint(read_recipe(base))
    types = GRPO_TYPES if "grpo" in base.name else DPO_TYPES
    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(parse_recipe)([str(base), "--use_cpu", "true"], types)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {base}: model_name_or_path: required (a Hub id or a local model directory; {base.parent} holds "
        "bases that recipes include (`include:`), not recipes to run)"
    )


def test_slurm_submit_refuses_a_base(capsys: pytest.CaptureFixture[str]) -> None:
    from veritune.cli import main

    base = REPO_ROOT / "recipes/base/oric_grpo.yaml"
    with pytest.raises(SystemExit) as exit_info:
        main(["slurm", "submit", "--entry", "grpo", "--recipe", str(base), "--gpus-per-node", "4", "--dry-run"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert f"{base}: model_name_or_path: required" in err and "$ sbatch" not in out


def test_every_base_is_included_by_a_recipe() -> None:
    included = {file for recipe in (REPO_ROOT / "recipes").glob("*.yaml") for file in load_recipe_file(recipe).files}
    assert {base.resolve() for base in BASES} <= {file.resolve() for file in included}


# ------------------------------------------------------------------------------------ readers of the merged recipe


def test_slurm_submit_dry_run_reads_an_inheriting_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """From another directory: the accelerate config the base names, resolved, goes to the train job; the run
    directory is the recipe's output_dir; the recipe's report_to (wandb, from the base) is checked."""
    from veritune.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    recipe = REPO_ROOT / "recipes/qwen3vl_oric.yaml"
    assert "accelerate_config" not in recipe.read_text() and "report_to" not in recipe.read_text()
    submit = ["slurm", "submit", "--entry", "grpo", "--recipe", str(recipe), "--gpus-per-node", "4", "--dry-run"]
    assert main(submit) == 0
    out = capsys.readouterr().out
    train = next(shlex.split(line[2:]) for line in out.splitlines() if line.startswith("$ sbatch"))
    assert train[-3:] == ["grpo", str(recipe), str(REPO_ROOT / "recipes/accelerate/zero3.yaml")]
    assert "run directory: outputs/qwen3vl-8b-oric-grpo" in out


def test_slurm_submit_tells_the_entry_point_from_the_bases_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from veritune.cli import main

    recipe = str(REPO_ROOT / "recipes/qwen3vl_oric.yaml")
    with pytest.raises(SystemExit):
        main(["slurm", "submit", "--entry", "dpo", "--recipe", recipe, "--gpus-per-node", "4", "--dry-run"])
    assert f"--entry dpo: {recipe} is a grpo recipe" in capsys.readouterr().err


def test_vllm_server_layout_reads_the_included_keys(tmp_path: Path) -> None:
    from veritune.slurm_layout import vllm_server_layout

    recipe = write(
        tmp_path / "r.yaml",
        f"include: {REPO_ROOT / 'recipes/qwen3vl_oric_vllm_server.yaml'}\nvllm_server_port: 8123\n",
    )
    layout = vllm_server_layout(str(recipe))
    assert layout is not None and layout.model == "Qwen/Qwen3-VL-8B-Instruct" and layout.port == 8123


def test_slurm_layout_prints_the_included_accelerate_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from veritune.slurm_layout import main

    recipe = write(tmp_path / "r.yaml", f"include: {TINY}\n")
    monkeypatch.chdir(tmp_path)
    assert main([str(recipe)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "VLLM_SERVER=0",
        f"RECIPE_ACCELERATE_CONFIG={REPO_ROOT / 'recipes/accelerate/single.yaml'}",
    ]


def test_launch_and_demo_read_the_included_accelerate_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from miniature import stages as demo
    from veritune import launch

    recipe = write(tmp_path / "r.yaml", f"include: {REPO_ROOT / 'recipes/qwen3vl_oric.yaml'}\n")
    monkeypatch.chdir(REPO_ROOT)
    assert launch.recipe_accelerate_config([str(recipe)]) == "recipes/accelerate/zero3.yaml"
    assert demo.recipe_accelerate_config(str(recipe)) == "recipes/accelerate/zero3.yaml"


def test_report_to_is_read_from_the_base(tmp_path: Path) -> None:
    from finetune.recipe import recipe_report_to

    recipe = write(tmp_path / "r.yaml", f"include: {REPO_ROOT / 'recipes/qwen3vl_oric.yaml'}\n")
    assert recipe_report_to([str(recipe)]) == ["wandb"]


def test_model_card_and_provenance_carry_the_bases(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from finetune.model_card import _card_recipe, run_provenance

    recipe = REPO_ROOT / "recipes/qwen3vl_oric_vllm.yaml"
    card = "\n".join(_card_recipe(str(recipe)))
    for included in ("recipes/qwen3vl_oric.yaml", "recipes/base/oric_grpo.yaml"):
        assert (REPO_ROOT / included).read_text().strip() in card
    assert "`" + str(REPO_ROOT / "recipes/base/oric_grpo.yaml") + "`, included (sha256 " in card
    provenance = run_provenance(SimpleNamespace(recipe=str(recipe), dataset_path=str(tmp_path / "none.json")))
    assert provenance["recipe"]["learning_rate"] == 2.0e-6 and provenance["recipe"]["use_vllm"] is True
    assert "include" not in provenance["recipe"]


def test_a_demo_stage_key_covers_the_recipes_bases(tmp_path: Path) -> None:
    from miniature.stages import DPO_RECIPE, RECIPE, file_digest, recipe_digest

    for recipe in (RECIPE, DPO_RECIPE):  # a recipe without includes keeps its key (the demo's caches stay valid)
        assert recipe_digest(REPO_ROOT / recipe) == file_digest(REPO_ROOT / recipe)
    base = write(tmp_path / "b.yaml", "seed: 1\n")
    recipe = write(tmp_path / "r.yaml", "include: b.yaml\n")
    before = recipe_digest(recipe)
    base.write_text("seed: 2\n")
    assert recipe_digest(recipe) != before
