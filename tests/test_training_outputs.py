"""What a training run shows and leaves behind: compact console lines, the full logs on disk, the W&B
project, the model card and the Hub upload (recorded offline through TRL's own push_to_hub)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env
from wandb_offline import offline_config, offline_history

from finetune.console import compact_log_line

HUB_TOKEN = "hf_verituneTestTokenNotARealOne0123"


@pytest.fixture(scope="module")
def pushed_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two GRPO steps (recipe given as --config), eval hook at step 2, W&B offline, push_to_hub recorded, a Hub
    token given on the command line."""
    from conftest import write_oric_fixture

    root = tmp_path_factory.mktemp("pushed-run")
    data, images = write_oric_fixture(root / "data")
    (data.parent / "manifest.json").write_text(json.dumps({"builder": "test"}))
    records = json.loads(data.read_text())
    bench = root / "bench.json"
    bench.write_text(
        json.dumps(
            [
                {**r, "problem": [r["problem"].split("?")[0] + "?"] * 4, "solution": r["solution"][10:-11]}
                for r in records
            ]
        )
    )
    record = root / "hub.json"
    output_dir = root / "run"
    command = [
        sys.executable,
        str(REPO_ROOT / "tests" / "hub_stub.py"),
        str(record),
        "finetune/grpo.py",
        "--config",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        str(tiny_qwen3vl),
        "--dataset_path",
        str(data),
        "--image_root",
        str(images),
        "--output_dir",
        str(output_dir),
        "--max_steps",
        "2",
        "--save_steps",
        "2",
        "--logging_steps",
        "1",
        "--push_to_hub",
        "true",
        "--hub_model_id",
        "someone/tiny-veritune",
        "--hub_strategy",
        "end",
        "--hub_token",
        HUB_TOKEN,
        "--eval_on_save",
        "true",
        "--eval_benchmarks",
        "oric_bench",
        "--eval_data",
        f"oric_bench={bench}",
        "--eval_image_root",
        str(images),
        "--eval_limit",
        "4",
    ]
    env = entry_env(WANDB_SILENT="false")  # W&B's console lines as a user sees them
    env.pop("WANDB_PROJECT", None)
    env.pop("DS_ACCELERATOR", None)
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return {
        "dir": output_dir,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "hub": json.loads(record.read_text()),
        "data": data,
    }


def test_console_shows_one_compact_line_per_step(pushed_run: dict) -> None:
    console = pushed_run["stdout"] + pushed_run["stderr"]
    steps = [line for line in console.splitlines() if "step 1/2 |" in line or "step 2/2 |" in line]
    assert len(steps) == 2, console[-3000:]
    assert "loss" in steps[0] and "reward" in steps[0] and "accuracy" in steps[0]
    assert all(len(line) < 250 for line in steps)
    assert "{'loss'" not in console  # no raw per-step dicts
    assert "\x1b[" not in console  # no raw colour codes when the output is not a terminal
    assert "unable to detect" not in console  # DeepSpeed's accelerator notice
    assert console.count("eval at step 2") == 1  # eval metrics once per checkpoint


def test_the_last_line_says_where_the_model_was_saved_without_wandbs_history(pushed_run: dict) -> None:
    """The run's last line says where the model is; W&B's end-of-run history and summary are not printed, and an
    offline run is not warned at each save that it has no URL."""
    lines = [line for line in pushed_run["stderr"].splitlines() if line.strip()]
    assert lines[-1].endswith(f"model saved to {pushed_run['dir']}"), lines[-5:]
    console = pushed_run["stdout"] + pushed_run["stderr"]
    assert "Run history:" not in console and "Run summary:" not in console, lines[-30:]
    assert "URL not available in offline run" not in pushed_run["stdout"] + pushed_run["stderr"]


def test_model_card_of_an_offline_wandb_run_asks_no_url(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card is written at every save: for an offline run it names the run id without asking wandb for the
    run's URL, which an offline run has not (wandb warns "URL not available in offline run" at each ask)."""
    import wandb

    from finetune.model_card import _card_wandb_run

    monkeypatch.setenv("WANDB_SILENT", "false")
    run = wandb.init(mode="offline", dir=str(tmp_path), project="veritune-test")
    try:
        capfd.readouterr()
        assert _card_wandb_run() == [f"W&B run id: {run.id}", ""]
        printed = capfd.readouterr()
        assert "URL not available" not in printed.out + printed.err
    finally:
        wandb.finish()


def test_full_logs_go_to_the_log_file(pushed_run: dict) -> None:
    rows = [json.loads(line) for line in (pushed_run["dir"] / "train_log.jsonl").read_text().splitlines()]
    step_rows = [row for row in rows if "loss" in row]
    assert [row["step"] for row in step_rows] == [1, 2]
    assert "rewards/accuracy_reward/mean" in step_rows[0] and len(step_rows[0]) > 10


def test_wandb_config_names_the_real_project(pushed_run: dict) -> None:
    config = offline_config(pushed_run["dir"] / "wandb")
    assert config["project"] == "veritune-demo"  # the recipe's wandb_project, not transformers' "huggingface"
    assert json.loads((pushed_run["dir"] / "wandb_run.json").read_text())["project"] == "veritune-demo"


def test_eval_sample_table_has_image_and_correct_column(pushed_run: dict) -> None:
    metrics = json.loads((pushed_run["dir"] / "eval" / "checkpoint-2" / "oric_bench" / "metrics.json").read_text())
    sample = metrics["samples"][0]
    assert Path(sample["image"]).is_file() and sample["correct"] in (True, False)
    tables = list((pushed_run["dir"] / "wandb").rglob("media/table/eval/oric_bench/samples_*.table.json"))
    assert tables, "no sample table was logged to W&B"
    columns = json.loads(tables[0].read_text())["columns"]
    assert {"image", "correct"} <= set(columns)
    # wandb stores the thumbnails as media files of the table's artifact, named in the run's record
    run_file = next((pushed_run["dir"] / "wandb").rglob("run-*.wandb"))
    assert b"media/images/" in run_file.read_bytes(), "no wandb.Image thumbnail was logged"


def test_model_card_names_base_model_data_recipe_and_eval(pushed_run: dict, tiny_qwen3vl: Path) -> None:
    card = (pushed_run["dir"] / "README.md").read_text()
    assert "[None]" not in card and f"`{tiny_qwen3vl}`" in card
    manifest = pushed_run["data"].parent / "manifest.json"
    assert hashlib.sha256(manifest.read_bytes()).hexdigest() in card
    # veritune_run.json records the same manifest the card names (one lookup: core.io.dataset_manifest)
    provenance = json.loads((pushed_run["dir"] / "veritune_run.json").read_text())
    assert provenance["dataset_manifest"] == json.loads(manifest.read_text())
    assert "## Recipe" in card and "num_generations: 4" in card
    assert "## Evaluation (eval hooks, step 2)" in card and "| oric_bench | macro/f1 |" in card
    assert 'AutoModelForImageTextToText.from_pretrained("someone/tiny-veritune")' in card


def test_push_to_hub_uploads_weights_processor_and_card(pushed_run: dict) -> None:
    calls = pushed_run["hub"]
    assert calls[0] == {"call": "create_repo", "repo_id": "someone/tiny-veritune"}
    upload = calls[-1]
    assert upload["call"] == "upload_folder" and upload["repo_id"] == "someone/tiny-veritune"
    assert {"model.safetensors", "README.md", "config.json", "tokenizer_config.json"} <= set(upload["files"])
    assert not any(name.startswith("checkpoint-") for name in upload["files"])
    assert "## Evaluation (eval hooks, step 2)" in upload["readme"]


def test_a_hub_token_on_the_command_line_reaches_the_hub_and_no_file_or_log(pushed_run: dict) -> None:
    """``--hub_token`` is used for the push and written nowhere: not in README.md, veritune_run.json (the run's and
    each checkpoint's), training_args.bin, the W&B offline run (config, metadata with the command line) or the
    console."""
    run = pushed_run["dir"]
    assert list(run.glob("checkpoint-*/veritune_run.json")) and list((run / "wandb").rglob("*.wandb"))
    holding = [
        str(p.relative_to(run)) for p in sorted(run.rglob("*")) if p.is_file() and HUB_TOKEN.encode() in p.read_bytes()
    ]
    assert holding == []
    assert HUB_TOKEN not in pushed_run["stdout"] + pushed_run["stderr"]
    assert pushed_run["hub"][-1]["token_sha256"] == hashlib.sha256(HUB_TOKEN.encode()).hexdigest()
    assert HUB_TOKEN not in json.dumps(pushed_run["hub"])


def test_dataset_manifest_is_found_for_each_build_layout(tmp_path: Path) -> None:
    from core.io import dataset_manifest

    build = tmp_path / "finer"  # a directory build: manifest.json inside
    build.mkdir()
    (build / "manifest.json").write_text("{}")
    (build / "train.jsonl").write_text("")
    assert dataset_manifest(build) == build / "manifest.json"
    assert dataset_manifest(build / "train.jsonl") == build / "manifest.json"  # a file of that build
    single = tmp_path / "oric_train.json"  # a file build: <stem>.manifest.json beside it, preferred
    single.write_text("[]")
    (tmp_path / "oric_train.manifest.json").write_text("{}")
    assert dataset_manifest(single) == tmp_path / "oric_train.manifest.json"
    assert dataset_manifest(tmp_path / "elsewhere" / "x.json") is None and dataset_manifest(None) is None


def test_compact_line_for_dpo_logs() -> None:
    line = compact_log_line(
        {"loss": 0.6931, "rewards/accuracies": 0.5, "rewards/margins": 0.01, "learning_rate": 5e-7, "epoch": 0.1}, 3, 10
    )
    assert line == "step 3/10 | loss 0.693 | pref_acc 0.5 | margin 0.01 | lr 5e-07"
    assert compact_log_line({"eval_oric_bench/accuracy": 50.0}, 3, 10) is None
    assert (
        compact_log_line({"eval_loss": 0.69, "eval_rewards/accuracies": 0.25, "eval_runtime": 1.0}, 3, 10)
        == "eval step 3/10 | loss 0.69 | pref_acc 0.25"
    )


def test_step_line_says_the_extra_sampling_rounds_against_their_limit() -> None:
    """``dynamic_sampling/rounds`` counts the first sampling round too (4 at ``dynamic_sampling_max_rounds: 3``):
    the step line shows the extra rounds, the number the recipe key bounds, beside that bound."""
    logs = {"loss": 0.0, "dynamic_sampling/kept_share": 0.5, "dynamic_sampling/rounds": 4.0}
    line = compact_log_line(logs, 2, 10, max_extra_rounds=3)
    assert line == "step 2/10 | loss 0 | kept 0.5 | extra_rounds 3/3"
    assert compact_log_line({**logs, "dynamic_sampling/rounds": 1.5}, 2, 10).endswith("| extra_rounds 0.5")


# ---- `veritune eval run --report-to wandb`


@pytest.mark.parametrize("into_training_run", [True, False], ids=["resumes-training-run", "new-run"])
def test_eval_run_reports_to_wandb(
    tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, into_training_run: bool
) -> None:
    import shutil

    from eval_fixtures import write_oric_bench

    from veritune.cli import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    write_oric_bench(tmp_path / "benchmarks")
    model = tiny_qwen3vl
    if into_training_run:
        model = tmp_path / "run" / "checkpoint-3"
        shutil.copytree(tiny_qwen3vl, model)
        (model.parent / "wandb_run.json").write_text(json.dumps({"id": "trainrun123", "project": "veritune-test"}))
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(model),
                "--benchmarks",
                "oric_bench",
                "--data-root",
                str(tmp_path / "benchmarks"),
                "--out",
                str(out),
                "--limit",
                "1",
                "--max-new-tokens",
                "4",
                "--report-to",
                "wandb",
            ]
        )
        == 0
    )
    wandb_root = (model.parent if into_training_run else out) / "wandb"
    runs = list(wandb_root.glob("offline-run-*"))
    assert len(runs) == 1
    if into_training_run:
        assert runs[0].name.endswith("-trainrun123")  # the training run's id, resumed
    rows = offline_history(wandb_root)
    logged = [row for row in rows if "eval/oric_bench/macro/f1" in row]
    assert logged and logged[0]["train/global_step"] == (3 if into_training_run else 0)


@pytest.mark.parametrize("hub_model_id", [None, "someone/tiny"])
def test_model_card_names_the_real_trainer_classes_and_loads_the_local_folder(
    tmp_path: Path, hub_model_id: str | None
) -> None:
    from types import SimpleNamespace

    from trl import DPOTrainer

    from finetune.configs import ScriptArguments, VerituneModelConfig
    from finetune.grpo_trainer import VerituneGRPOTrainer
    from finetune.model_card import model_card_text

    model_args = VerituneModelConfig(model_name_or_path="Qwen/Qwen3-VL-8B-Instruct")
    for cls, expected in (
        (VerituneGRPOTrainer, "(GRPO: veritune's `VerituneGRPOTrainer`, a subclass of TRL's `GRPOTrainer`)"),
        (DPOTrainer, "(DPO: TRL's `DPOTrainer`)"),
    ):
        trainer = cls.__new__(cls)
        trainer.args = SimpleNamespace(hub_model_id=hub_model_id, output_dir=str(tmp_path / "run"))
        trainer.state = SimpleNamespace(log_history=[])
        card = model_card_text(trainer, ScriptArguments(), model_args, "run")
        assert expected in card
        tags = card.split("tags:")[1].split("model_name")[0]
        assert f"- {cls.__name__.removeprefix('Veritune')[:-7].lower()}\n" in tags and "veritunegrpo" not in card
        repo = hub_model_id or str((tmp_path / "run").resolve())
        assert f'AutoModelForImageTextToText.from_pretrained("{repo}")' in card
