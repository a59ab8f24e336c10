"""The ``miniature.cpu_speed.reference_in_workers`` plugin: full-parameter DPO whose frozen reference runs in the
data loader's workers (``miniature.cpu_speed.ReferenceLogpsCollator``) trains the same weights, bit for bit on this
CPU, as TRL's reference forward in the training step; runs it cannot serve are refused in one line."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers import run_entry, write_finer_fixture
from safetensors.torch import load_file

RECIPE = "recipes/miniature/tiny_finer_demo.yaml"
SPEED = ["miniature.cpu_speed.compact_lm_head", "miniature.cpu_speed.foreach_adamw"]
IN_WORKERS = "miniature.cpu_speed.reference_in_workers"


def dpo_flags(model: Path, data: Path, out: Path) -> list[str | Path]:
    flags: list[str | Path] = ["--model_name_or_path", model, "--dataset_path", data, "--output_dir", out]
    flags += ["--max_steps", "3", "--save_strategy", "no", "--use_peft", "false", "--learning_rate", "1e-3"]
    return [*flags, "--freeze_vision_tower", "true", "--vision_feature_cache", "true", "--report_to", "none"]


def test_the_reference_in_the_workers_trains_the_same_weights(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    data = write_finer_fixture(tmp_path / "finer", num_images=4)
    weights = {}
    for side, workers, in_workers in (("online", "0", "false"), ("worker", "1", "true"), ("collator", "0", "true")):
        out = tmp_path / side
        flags = [*dpo_flags(tiny_qwen3vl, data, out), "--dataloader_num_workers", workers]
        flags += ["--plugins", *SPEED, *([IN_WORKERS] if in_workers == "true" else [])]
        result = run_entry("dpo.py", RECIPE, *flags)
        assert result.returncode == 0, result.stderr[-3000:]
        said = "reference_in_workers: the frozen reference runs in"
        assert (said in result.stderr) is (in_workers == "true")
        weights[side] = load_file(out / "model.safetensors")
    before = load_file(tiny_qwen3vl / "model.safetensors")
    assert any(not torch.equal(before[name], weights["worker"][name]) for name in before if "language_model" in name)
    for side in ("worker", "collator"):
        assert weights[side].keys() == weights["online"].keys()
        assert all(torch.equal(weights["online"][name], weights[side][name]) for name in weights["online"]), side


def test_a_lora_run_is_refused_in_one_line(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    data = write_finer_fixture(tmp_path / "finer", num_images=2)
    flags = dpo_flags(tiny_qwen3vl, data, tmp_path / "lora")
    flags[flags.index("--use_peft") + 1] = "true"
    result = run_entry("dpo.py", RECIPE, *flags, "--plugins", IN_WORKERS)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"error: plugins: {IN_WORKERS} needs a full-parameter DPO run" in result.stderr


def test_a_plugin_that_does_not_import_is_refused_before_any_model_loads(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    data = write_finer_fixture(tmp_path / "finer", num_images=2)
    flags = dpo_flags(tiny_qwen3vl, data, tmp_path / "out")
    result = run_entry("dpo.py", RECIPE, *flags, "--plugins", "miniature.cpu_speed.no_such_plugin")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "error: plugins: miniature.cpu_speed.no_such_plugin: cannot be imported" in result.stderr
