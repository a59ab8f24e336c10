"""A command replaces or removes only a folder veritune's own record says it made: a foreign folder is refused in
one line and left as it was, ``--force`` included; the root, home and working folders and the repository root are
never a target; a run directory holding checkpoints without a veritune run's record is not this run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from test_stale_outputs import finer_inputs, run_cli

from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def foreign_folder(path: Path) -> Path:
    """A folder of someone else's files (veritune's own file names among them)."""
    (path / "thesis").mkdir(parents=True)
    (path / "thesis" / "chapter1.tex").write_text("keep me")
    (path / "manifest.json").write_text(json.dumps({"name": "not a veritune build"}))
    return path


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    return lines[0]


def finer_command(tmp_path: Path, out: Path) -> list[str]:
    inputs = finer_inputs(tmp_path)
    return [
        "build",
        "finer",
        "--scene-graphs",
        str(inputs["b"]),
        "--image-root",
        str(inputs["images"]),
        "--out",
        str(out),
    ]


def world_command(tmp_path: Path, out: Path) -> list[str]:
    return ["build", "synthetic-world", "--train-images", "4", "--val-images", "2", "--out", str(out)]


BUILDS = {"finer": finer_command, "synthetic-world": world_command}


@pytest.mark.parametrize("builder", sorted(BUILDS))
def test_force_refuses_a_folder_no_veritune_build_made_and_leaves_it_intact(
    builder: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = foreign_folder(tmp_path / "mine")
    before = snapshot(out)
    code, _, err = run_cli([*BUILDS[builder](tmp_path, out), "--force"], capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: --out {out}: not written by a veritune build (no .veritune_build.json); --force replaces only a "
        "veritune build: choose another --out, or an empty folder"
    )
    assert snapshot(out) == before
    assert not any(path.name.endswith(".veritune-staging") for path in tmp_path.iterdir())


@pytest.mark.parametrize("builder", sorted(BUILDS))
def test_force_rebuilds_its_own_output(builder: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "built"
    command = BUILDS[builder](tmp_path, out)
    assert run_cli(command, capsys)[0] == 0
    first = json.loads((out / ".veritune_build.json").read_text())
    code, _, err = run_cli([*command, "--seed", "5", "--force"], capsys)
    assert code == 0, err[-3000:]
    rebuilt = json.loads((out / ".veritune_build.json").read_text())
    assert rebuilt != first and rebuilt["build"]["settings"]["seed"] == 5


@pytest.mark.parametrize("where", ["home", "above home", "working folder", "repository root"])
def test_protected_folders_are_never_an_out(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "users" / "alice"
    home.mkdir(parents=True)
    (home / ".veritune_build.json").write_text(json.dumps({"build": {"command": "build finer"}}))  # looks like one
    (home / "notes.txt").write_text("keep me")
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    out, what = {
        "home": (home, "is the home folder"),
        "above home": (home.parent, "is above the home folder"),
        "working folder": (work, "is the working folder"),
        "repository root": (REPO_ROOT, "is the repository root"),
    }[where]
    before = snapshot(home)
    code, _, err = run_cli([*finer_command(tmp_path, out), "--force"], capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: --out {out}: {what}, which veritune never replaces or removes; choose a folder of its own"
    )
    assert snapshot(home) == before


def test_also_save_refuses_a_foreign_copy_folder_before_building(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "finer"
    copy = foreign_folder(tmp_path / "finer-hf")
    before = snapshot(copy)
    code, _, err = run_cli([*finer_command(tmp_path, out), "--also-save", "parquet"], capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: --also-save {copy}: holds files not written by --also-save (no veritune dataset card README.md); "
        "veritune replaces only a copy it made: move it away, or choose another --out"
    )
    assert snapshot(copy) == before and not out.exists()


def test_also_save_replaces_its_own_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "finer"
    command = [*finer_command(tmp_path, out), "--also-save", "disk"]
    assert run_cli(command, capsys)[0] == 0
    assert run_cli([*command, "--seed", "2", "--force"], capsys)[0] == 0
    assert "Built by `veritune build finer`" in (tmp_path / "finer-hf" / "README.md").read_text()


@pytest.mark.parametrize("mode", [[], ["--warm-start"], ["--pretrain-vision", "{split}"]])
def test_tiny_model_refuses_a_foreign_out_before_any_work(
    mode: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = foreign_folder(tmp_path / "mine")
    before = snapshot(out)
    argv = ["tiny-model", "--out", str(out), *(arg.format(split=tmp_path / "split") for arg in mode)]
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: --out {out}: holds files not made by veritune tiny-model (no veritune_tiny.json); veritune "
        "replaces only a folder it made: choose another --out, or an empty folder"
    )
    assert snapshot(out) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine"]  # no work folder either


def test_tiny_model_replaces_its_own_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "veritune_tiny.json").write_text(json.dumps({"family": "qwen25vl", "seed": 1}))  # an earlier tiny model
    (out / "stale.safetensors").write_text("x")
    assert run_cli(["tiny-model", "--out", str(out), "--format-warmup-steps", "0", "--seed", "2"], capsys)[0] == 0
    assert json.loads((out / "veritune_tiny.json").read_text()) == {"family": "qwen3vl", "seed": 2}
    assert not (out / "stale.safetensors").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tiny"]  # no build folder left


def test_demo_refuses_a_folder_without_stage_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = foreign_folder(tmp_path / "mine")
    (out / "world").mkdir()  # a demo stage's output name, but no stages/ records: not a demo's
    (out / "world" / "data.bin").write_text("keep me")
    before = snapshot(out)
    code, _, err = run_cli(["demo", "--out", str(out)], capsys)
    assert code == 2
    assert one_error_line(err) == (
        f"error: --out {out}: holds files not made by a veritune demo (no stages); veritune replaces only a "
        "folder it made: choose another --out, or an empty folder"
    )
    assert snapshot(out) == before and not (out / "stages").exists()


@pytest.mark.parametrize("resume", [[], ["--resume_from_checkpoint", "auto"]])
def test_a_run_directory_with_foreign_checkpoints_is_refused_and_left_as_it_was(
    resume: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from finetune import grpo

    run = tmp_path / "run"
    (run / "checkpoint-40").mkdir(parents=True)  # someone else's run: checkpoints, no veritune_run.json
    (run / "checkpoint-40" / "model.safetensors").write_text("their weights")
    (run / "checkpoint-40" / "config.json").write_text("{}")
    before = snapshot(run)
    (tmp_path / "model").mkdir()  # the recipe's paths must exist (checked first); no model loads
    (tmp_path / "train.json").write_text("[]")
    argv = ["recipes/miniature/tiny_oric_demo.yaml", "--model_name_or_path", str(tmp_path / "model")]
    argv += ["--dataset_path", str(tmp_path / "train.json"), "--image_root", str(tmp_path), "--output_dir", str(run)]
    argv += ["--report_to", "none", "--use_cpu", "true", *resume]
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr("finetune.training.get_model_and_processor", lambda *a, **k: pytest.fail("a model loaded"))
    monkeypatch.setattr(sys, "argv", ["finetune/grpo.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        grpo.run_entry_script(grpo.main, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    assert exit_info.value.code == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"error: output_dir {run}: holds training outputs but no veritune_run.json of a veritune run, so not "
        "this run; choose another output_dir, or add --overwrite_output_dir true to replace them"
    )
    assert snapshot(run) == before and sorted(p.name for p in run.iterdir()) == ["checkpoint-40"]


def test_overwrite_output_dir_never_clears_a_protected_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.errors import UserError
    from finetune.recipe import parse_recipe
    from finetune.run_dir import claim_run_dir

    home = tmp_path / "home"
    (home / "checkpoint-1").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    argv = [str(REPO_ROOT / "recipes/miniature/tiny_oric_demo.yaml"), "--use_cpu", "true", "--output_dir", str(home)]
    args = parse_recipe(
        [*argv, "--overwrite_output_dir", "true"], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
    )
    with pytest.raises(UserError, match=r"output_dir .*: is the home folder, which veritune never replaces"):
        claim_run_dir(*args)
    assert (home / "checkpoint-1").is_dir()
