"""Runs that never mix: a run directory belongs to one run (another run's settings are refused before anything
loads, unless ``overwrite_output_dir``), and a run that names W&B without credentials stops in one line at every
entry point, before any model loads."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_entry

from core.errors import UserError
from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.recipe import parse_recipe, recipe_report_to
from finetune.run_dir import (
    _difference_from_recorded,
    claim_run_dir,
    counts_as_setting,
    recorded_settings,
    run_settings,
    settings_difference,
)

GRPO_TYPES = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)


def settings_of(*argv: str) -> dict:
    return run_settings(
        *parse_recipe(["recipes/miniature/tiny_oric_demo.yaml", "--use_cpu", "true", *argv], GRPO_TYPES)
    )


@pytest.mark.parametrize(
    ("override", "counts"),
    [
        (("--learning_rate", "5e-5"), True),
        (("--max_steps", "3"), True),
        (("--seed", "1"), True),
        (("--model_name_or_path", "other/model"), True),
        (("--output_dir", "elsewhere"), False),
        (("--resume_from_checkpoint", "auto"), False),
        (("--logging_steps", "7"), False),
        (("--report_to", "none"), False),
        (("--save_steps", "3"), False),
        (("--eval_on_save", "true", "--eval_benchmarks", "pope"), False),
        (("--wandb_project", "other"), False),
        (("--overwrite_output_dir", "true"), False),
    ],
)
def test_what_counts_as_another_run(override: tuple[str, ...], counts: bool) -> None:
    difference = settings_difference(settings_of("--output_dir", "run"), settings_of("--output_dir", "run", *override))
    assert bool(difference) == counts, difference
    if counts:
        assert difference.startswith(override[0][2:] + ": ")


def test_the_feature_cache_is_the_same_run_a_tower_freeze_is_not() -> None:
    frozen = settings_of("--output_dir", "run", "--freeze_vision_tower", "true")
    cached = settings_of("--output_dir", "run", "--freeze_vision_tower", "true", "--vision_feature_cache", "true")
    assert settings_difference(frozen, cached) == ""
    assert settings_difference(settings_of("--output_dir", "run"), frozen).startswith("freeze_vision_tower: ")


def test_the_data_manifest_counts(tmp_path: Path) -> None:
    data = tmp_path / "oric_train.json"
    data.write_text("[]")
    manifest = tmp_path / "oric_train.manifest.json"
    manifest.write_text(json.dumps({"build": {"seed": 0}}))
    before = settings_of("--dataset_path", str(data))
    manifest.write_text(json.dumps({"build": {"seed": 1}}))
    assert settings_difference(before, settings_of("--dataset_path", str(data))).startswith("data: manifest sha256:")


def test_a_directory_that_kept_only_its_checkpoints_is_compared_through_them(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "veritune_run.json").write_text(json.dumps({"settings": {"seed": 3}}))
    assert recorded_settings(tmp_path) == {"seed": 3}


def test_a_setting_an_older_veritune_did_not_record_counts_only_off_its_default(tmp_path: Path) -> None:
    # a run recorded before freeze_vision_tower existed is this run while the key stays at its default
    args = parse_recipe(
        ["recipes/miniature/tiny_oric_demo.yaml", "--use_cpu", "true", "--output_dir", str(tmp_path)], GRPO_TYPES
    )
    older = run_settings(*args)
    del older["freeze_vision_tower"]
    (tmp_path / "veritune_run.json").write_text(json.dumps({"settings": older}))
    assert _difference_from_recorded(tmp_path, *args) == ""
    frozen = parse_recipe(
        [
            "recipes/miniature/tiny_oric_demo.yaml",
            "--use_cpu",
            "true",
            "--output_dir",
            str(tmp_path),
            "--freeze_vision_tower",
            "true",
        ],
        GRPO_TYPES,
    )
    assert _difference_from_recorded(tmp_path, *frozen) == "freeze_vision_tower: null -> true"


def test_overwrite_output_dir_starts_the_same_run_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # the same settings would resume: overwrite_output_dir is the explicit way to start over instead
    argv = ["recipes/miniature/tiny_oric_demo.yaml", "--use_cpu", "true", "--output_dir", str(tmp_path)]
    args = parse_recipe([*argv, "--overwrite_output_dir", "true"], GRPO_TYPES)
    (tmp_path / "veritune_run.json").write_text(json.dumps({"settings": run_settings(*args)}))
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "train_log.jsonl").write_text('{"step": 1}\n')
    with caplog.at_level("WARNING", logger="veritune"):
        claim_run_dir(*args)
    assert list(tmp_path.iterdir()) == []
    assert f"overwrite_output_dir: removing the earlier run in {tmp_path} (the same settings); starting over" in (
        caplog.text
    )


def test_overwrite_output_dir_never_clears_the_checkpoint_it_is_asked_to_resume(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-1").mkdir()
    argv = ["recipes/miniature/tiny_oric_demo.yaml", "--use_cpu", "true", "--output_dir", str(tmp_path)]
    argv += ["--overwrite_output_dir", "true", "--resume_from_checkpoint", str(tmp_path / "checkpoint-1")]
    with pytest.raises(UserError, match="overwrite_output_dir: true clears .* drop one of the two"):
        claim_run_dir(*parse_recipe(argv, GRPO_TYPES))
    assert (tmp_path / "checkpoint-1").is_dir()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_run_into_a_run_directory_is_refused_unless_overwritten(
    tiny_qwen3vl: Path, oric_fixture: tuple[Path, Path], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    common = [
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        oric_fixture[0],
        "--image_root",
        oric_fixture[1],
        "--output_dir",
        run,
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--max_completion_length",
        "8",
        "--report_to",
        "none",
    ]
    first = run_entry("grpo.py", *common)
    assert first.returncode == 0, first.stderr[-3000:]
    weights = digest(run / "model.safetensors")
    files = {path: path.stat().st_mtime_ns for path in run.rglob("*") if path.is_file()}
    learning_rates = [
        row["learning_rate"]
        for row in json.loads((run / "trainer_state.json").read_text())["log_history"]
        if "learning_rate" in row
    ]
    recorded = json.loads((run / "veritune_run.json").read_text())["settings"]
    assert json.loads((run / "checkpoint-1" / "veritune_run.json").read_text())["settings"] == recorded

    other = run_entry("grpo.py", *common, "--learning_rate", "5e-5")
    assert other.returncode == 2
    assert other.stderr.strip() == (
        f"error: output_dir {run}: holds a run with other settings (learning_rate: 0.0001 -> 5e-05); choose "
        "another output_dir, rerun with that run's settings to resume it, or add --overwrite_output_dir true to "
        "replace it"
    )
    assert digest(run / "model.safetensors") == weights
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*") if path.is_file()} == files, "the run was touched"

    # the same run (settings that do not change it aside): the finished run is reported, nothing written
    same = run_entry("grpo.py", *common, "--resume_from_checkpoint", "auto", "--logging_steps", "5")
    assert same.returncode == 0, same.stderr[-3000:]
    assert "already holds this run, finished at step 1 of 1: nothing to do" in same.stderr
    assert {path: path.stat().st_mtime_ns for path in run.rglob("*") if path.is_file()} == files

    (run / "train_log.jsonl").write_text("{}\n")  # anything the first run left must go with it
    replaced = run_entry("grpo.py", *common, "--learning_rate", "5e-5", "--overwrite_output_dir", "true")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert "overwrite_output_dir: removing the earlier run" in replaced.stderr
    assert json.loads((run / "veritune_run.json").read_text())["settings"]["learning_rate"] == 5e-5
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert [row["learning_rate"] for row in state["log_history"] if "learning_rate" in row] != learning_rates
    assert (run / "model.safetensors").stat().st_mtime_ns != files[run / "model.safetensors"]
    assert not (run / "train_log.jsonl").exists() or "{}" not in (run / "train_log.jsonl").read_text().split("\n")[0]


# ---------------------------------------------------------------------------------------------- W&B credentials

LOGIN_LINE = (
    "but W&B has no credentials here: run `wandb login` (or set WANDB_API_KEY), or log offline with "
    "WANDB_MODE=offline (sync later with `wandb sync`)"
)


@pytest.fixture()
def no_wandb_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home without a netrc or wandb settings, and no W&B variables: what a new user has."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_DISABLED", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / ".config" / "wandb"))


@pytest.fixture()
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("finetune.training.get_model_and_processor", loaded)
    monkeypatch.setattr("veritune.launch.launch_command", loaded, raising=False)


def test_credentials_are_found_where_wandb_looks(
    no_wandb_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.wandb_login import wandb_can_log

    assert not wandb_can_log()
    settings = tmp_path / "home" / ".config" / "wandb" / "settings"
    settings.parent.mkdir(parents=True)
    settings.write_text("[default]\nmode = offline\n")  # what `wandb offline` writes
    assert wandb_can_log()
    settings.unlink()
    netrc = tmp_path / "home" / ".netrc"
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {'a' * 40}\n")  # what `wandb login` writes
    netrc.chmod(0o600)
    assert wandb_can_log()
    netrc.unlink()
    for name, value in (("WANDB_MODE", "disabled"), ("WANDB_MODE", "offline"), ("WANDB_API_KEY", "x" * 40)):
        monkeypatch.setenv(name, value)
        assert wandb_can_log()
        monkeypatch.delenv(name)


def test_report_to_is_read_as_the_entry_script_reads_it() -> None:
    recipe = "recipes/miniature/tiny_oric_demo.yaml"
    assert recipe_report_to([recipe]) == ["wandb"]
    assert recipe_report_to([recipe, "--report_to", "none"]) == ["none"]
    assert recipe_report_to(["--report_to=tensorboard"]) == ["tensorboard"]
    assert recipe_report_to(["recipes/miniature/tiny_sft_warmstart.yaml", "--report_to", "wandb", "--seed", "1"]) == [
        "wandb"
    ]
    assert recipe_report_to([]) == "none"


@pytest.mark.parametrize("script", ["grpo", "dpo", "sft"])
def test_entry_script_without_wandb_credentials_stops_in_one_line(
    script: str,
    no_wandb_credentials: None,
    no_model_load: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib

    module = importlib.import_module(f"finetune.{script}")
    recipe = {
        "grpo": "miniature/tiny_oric_demo",
        "dpo": "miniature/tiny_finer_demo",
        "sft": "miniature/tiny_sft_warmstart",
    }[script]
    monkeypatch.chdir(REPO_ROOT)
    argv = [f"recipes/{recipe}.yaml", "--output_dir", str(tmp_path / "run"), "--report_to", "wandb"]
    (tmp_path / "model").mkdir()  # the recipe's paths must exist (checked first); the model is never loaded
    (tmp_path / "train.json").write_text("[]")
    argv += ["--model_name_or_path", str(tmp_path / "model"), "--dataset_path", str(tmp_path / "train.json")]
    argv += ["--image_root", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [f"finetune/{script}.py", *argv])
    types = {
        "grpo": lambda: GRPO_TYPES,
        "dpo": lambda: (module.DPOScriptArguments, module.VerituneDPOConfig, module.VerituneModelConfig),
        "sft": lambda: (module.SFTScriptArguments, module.VerituneSFTConfig, module.VerituneModelConfig),
    }[script]()
    with pytest.raises(SystemExit) as exit_info:
        module.run_entry_script(module.main, types)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: report_to names wandb, {LOGIN_LINE}, or set report_to: none"
    assert not (tmp_path / "run").exists()


def test_launch_without_wandb_credentials_stops_before_any_worker(
    no_wandb_credentials: None, no_model_load: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from veritune.cli import main

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr("accelerate.commands.launch.launch_command", lambda args: pytest.fail("a worker started"))
    command = ["launch", "--config_file", "recipes/accelerate/single.yaml", "finetune/grpo.py"]
    assert main([*command, "recipes/miniature/tiny_oric_demo.yaml"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: grpo.py: report_to names wandb, {LOGIN_LINE}, or set report_to: none"
    )
    started: list[object] = []
    monkeypatch.setattr("accelerate.commands.launch.launch_command", started.append)
    assert main([*command, "recipes/miniature/tiny_oric_demo.yaml", "--report_to", "none"]) == 0 and len(started) == 1


def test_slurm_submit_without_wandb_credentials_submits_nothing(
    no_wandb_credentials: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from veritune.cli import main

    monkeypatch.chdir(REPO_ROOT)
    recipe = str(REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["slurm", "submit", "--entry", "grpo", "--recipe", recipe, "--dry-run"])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert err.strip() == f"error: {recipe}: report_to names wandb, {LOGIN_LINE}, or set report_to: none"
    assert "sbatch" not in out


def test_eval_watch_without_wandb_credentials_stops_before_evaluating(
    no_wandb_credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from eval_fixtures import write_oric_bench

    from veritune.cli import main

    run = tmp_path / "run"
    (run / "checkpoint-1").mkdir(parents=True)
    (run / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (run / "wandb_run.json").write_text(json.dumps({"id": "abc", "project": "p", "entity": None, "group": None}))
    write_oric_bench(tmp_path / "bench", questions=2)
    monkeypatch.setattr("eval_hooks.watch.evaluate_checkpoint", lambda *a, **k: pytest.fail("evaluated"))
    argv = ["eval", "watch", str(run), "--benchmarks", "oric_bench", "--data-root", str(tmp_path / "bench"), "--once"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {run}: the training logs to W&B (wandb_run.json), {LOGIN_LINE}, or set WANDB_MODE=disabled to "
        "log nothing"
    )


def test_every_eval_plan_key_is_not_a_run_setting() -> None:
    # the run guard takes the hook's keys from the eval plan's one list, so a key added there never makes a
    # resumed run look like another run (the list was once kept twice and three keys went missing)
    from eval_hooks.plan import SCRIPT_KEYS

    assert SCRIPT_KEYS and not [key for key in SCRIPT_KEYS if counts_as_setting(key)]
