"""`veritune demo --finer seeing`: FINER's half on a base that sees per-instance attributes (miniature.finer_half),
at toy sizes: every stage through the public commands, the eval hook's step-0 and final scores of the probe and
POPE, the table's rows, and reruns that reuse what is unchanged. The measured sizes' numbers are in
docs/RESULTS.md; this checks the wiring, not the outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UserError
from miniature import finer_half, stages
from miniature.finer_half import RUN, TABLE, FinerHalfSizes, finer_half_paths, run_finer_half
from miniature.stages import STAGE_STATUS, results_table

TOY = FinerHalfSizes(
    fresh_images=60, world_images=(60, 40, 20), tower_steps=5, warmstart_steps=4, dpo_steps=2, eval_limit=40
)
STAGES = [
    "seeing-world",
    "seeing-base",
    "seeing-fresh",
    "seeing-model",
    "seeing-data",
    "seeing-pairs",
    "seeing-probe",
    "seeing-dpo",
]


@pytest.fixture(scope="module")
def seeing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seeing")
    STAGE_STATUS.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages, "CACHE", out.parent / f"{out.name}-cache")  # the shared cache, this module's own
        run_finer_half(out, 0, TOY)
    assert STAGE_STATUS == dict.fromkeys(STAGES, "run")
    return out


def test_every_stage_builds_what_the_measured_path_used(seeing: Path) -> None:
    paths = finer_half_paths(seeing)
    tiny = json.loads((paths["model"] / "veritune_tiny.json").read_text())
    assert tiny["patch_size"] == 8 and tiny["vision_pretraining"]["steps"] == TOY.tower_steps
    data = json.loads((paths["data"].with_name("train.manifest.json")).read_text())
    assert data["settings"] == {  # the attribute recipe's former keys, its seed
        "questions_per_image": 2,
        "captions": False,
        "mcq_per_image": 0,
        "answer_styles": ["plain"],
        "attribute_pairs_per_image": 3,
        "attribute_pair_slots": None,
        "multi_image": None,
        "seed": 0,
    }
    assert data["source"] == str(paths["fresh"] / "train" / "instances.json")
    assert data["scene_graphs"] == str(paths["fresh"] / "train" / "scene_graphs.json")
    base = json.loads((paths["base"] / "veritune_run.json").read_text())
    assert base["script_args"]["recipe"] == "recipes/miniature/tiny_sft_attributes.yaml"
    assert base["settings"]["dataset_path"] == str(paths["data"])
    assert base["settings"]["freeze_vision_tower"] is True and base["settings"]["max_steps"] == TOY.warmstart_steps
    dpo = json.loads((paths["dpo"] / "veritune_run.json").read_text())
    assert dpo["script_args"]["recipe"] == "recipes/miniature/tiny_finer_contrast.yaml"
    settings = dpo["settings"]
    assert settings["max_steps"] == TOY.dpo_steps and settings["learning_rate"] == TOY.dpo_learning_rate
    assert settings["model_name_or_path"] == str(paths["base"]) and settings["loss_type"] == ["sigmoid", "sft"]
    manifest = json.loads((paths["pairs"] / "manifest.json").read_text())
    assert manifest  # the image-contrast pairs of the world's train split
    assert (paths["dpo"] / "report.html").is_file()


def test_the_table_reads_the_hooks_step_0_and_last_scores(seeing: Path) -> None:
    from eval_hooks.bootstrap import format_table

    rows = results_table({RUN: finer_half_paths(seeing)["dpo"]}, TABLE)
    labels = [f"{benchmark} {metric} ({RUN})" for benchmark, metric, _ in TABLE]
    assert [row["label"] for row in rows] == labels
    assert all(row["step"] == TOY.dpo_steps and row["trained_by"] == RUN for row in rows)
    assert all(row["low"] <= row["difference"] <= row["high"] for row in rows)
    text = format_table(rows)
    assert all(label in text for label in labels)


def test_a_rerun_reuses_every_stage_and_a_new_dpo_size_reruns_only_dpo(
    seeing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dpo_state = finer_half_paths(seeing)["dpo"] / "trainer_state.json"
    before = dpo_state.stat().st_mtime_ns
    STAGE_STATUS.clear()
    run_finer_half(seeing, 0, TOY, report=False)
    # the base is there: what it was built from (the fresh world, the tower) is not even looked at
    assert STAGE_STATUS == dict.fromkeys(
        [name for name in STAGES if name not in ("seeing-fresh", "seeing-model", "seeing-data")], "reused"
    )
    assert dpo_state.stat().st_mtime_ns == before
    # a DPO step count of its own: only DPO runs again
    STAGE_STATUS.clear()
    run_finer_half(seeing, 0, FinerHalfSizes(**{**TOY.__dict__, "dpo_steps": 3}), report=False)
    assert STAGE_STATUS == {
        **dict.fromkeys(["seeing-world", "seeing-base", "seeing-pairs", "seeing-probe"], "reused"),
        "seeing-dpo": "run",
    }
    assert json.loads(dpo_state.read_text())["global_step"] == 3


def test_another_demo_directory_takes_the_base_from_the_shared_cache(
    seeing: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stages, "CACHE", seeing.parent / f"{seeing.name}-cache")
    launched, launch = [], finer_half.launch
    monkeypatch.setattr(
        finer_half, "launch", lambda script, *a, **k: (launched.append(script), launch(script, *a, **k))
    )
    STAGE_STATUS.clear()
    run_finer_half(tmp_path / "demo", 0, TOY, report=False)
    assert STAGE_STATUS["seeing-base"] == "shared cache" and "seeing-fresh" not in STAGE_STATUS
    assert launched == ["finetune/dpo.py"]  # no tower pretraining, no warm-start
    built, cached = finer_half_paths(tmp_path / "demo")["base"], finer_half_paths(seeing)["base"]
    assert (built / "model.safetensors").read_bytes() == (cached / "model.safetensors").read_bytes()
    assert not finer_half_paths(tmp_path / "demo")["fresh"].exists()
    # the stages after the base have the keys they have where it was built: the same inputs, the same keys
    for name in ("seeing-base", "seeing-pairs", "seeing-probe"):
        assert stages.recorded_key(tmp_path / "demo", name) == stages.recorded_key(seeing, name)


def test_a_moved_copy_reuses_every_stage_and_gives_the_same_table(seeing: Path, tmp_path: Path) -> None:
    """The demo folder moved elsewhere (the original gone): the stage keys hold (paths count relative to the folder)
    and the table's intervals read the probe and POPE where they moved (eval_hooks.results.relocated)."""
    import os
    import shutil

    run_finer_half(seeing, 0, TOY, report=False)  # the toy sizes (a test above trained DPO for another count)
    table = results_table({RUN: finer_half_paths(seeing)["dpo"]}, TABLE)
    moved = tmp_path / "moved"
    shutil.copytree(seeing, moved)
    away = seeing.with_name(seeing.name + "-away")
    os.rename(seeing, away)  # the hook's records name paths under the original folder: none of them exists now
    try:
        STAGE_STATUS.clear()
        run_finer_half(moved, 0, TOY, report=False)
        assert set(STAGE_STATUS.values()) == {"reused"}, STAGE_STATUS
        assert results_table({RUN: finer_half_paths(moved)["dpo"]}, TABLE) == table
    finally:
        os.rename(away, seeing)


def test_an_unknown_finer_half_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from miniature.pipeline import run_demo
    from veritune.cli import main

    with pytest.raises(UserError, match="--finer: expected one of seeing, tuples"):
        run_demo(tmp_path / "demo", finer="letters")
    assert not (tmp_path / "demo").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--finer", "letters", "--out", str(tmp_path / "demo")])
    assert exit_info.value.code == 2 and "invalid choice: 'letters'" in capsys.readouterr().err


def test_a_long_background_wait_prints_the_stages_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from miniature.stages import Background, latest_progress

    log = tmp_path / "logs" / "stage.log"

    def stage() -> None:
        with log.open("a") as stream:
            stream.write("$ python finetune/sft.py recipe.yaml\nLoading weights: 100%|###| 64/64\r\n")
            stream.write("step 200/6000 | loss 0.203 | lr 0.0002\nwandb: some notice\n")
        time.sleep(0.5)

    Background("a stage", log, stage).join(progress_every=0.1)
    printed = capsys.readouterr().out
    assert "  (a stage) step 200/6000 | loss 0.203 | lr 0.0002\n" in printed  # the last step line, not the notice
    assert latest_progress(tmp_path / "missing.log") is None


def test_the_cache_keys_hash_code_not_prose(tmp_path: Path) -> None:
    """A Python file counts in a shared-cache key by its syntax tree without docstrings: an edit to its comments,
    docstrings or layout keeps the key (no needless rebuild of a base), an edit to what it computes changes it."""
    module = tmp_path / "step.py"
    module.write_text('"""Old words."""\n\n\ndef scale(x):\n    """Times two."""\n    return x * 2  # doubled\n')
    key = stages.warmstart_key(module)
    module.write_text('"""New words, a whole paragraph of them."""\n\ndef scale(x):\n    return x*2\n')
    assert stages.warmstart_key(module) == key
    module.write_text('"""New words."""\n\ndef scale(x):\n    return x * 3\n')
    assert stages.warmstart_key(module) != key
    data = tmp_path / "table.jsonl"  # any other file: its bytes
    data.write_text('{"a": 1}\n')
    before = stages.warmstart_key(data)
    data.write_text('{"a": 1} \n')
    assert stages.warmstart_key(data) != before
