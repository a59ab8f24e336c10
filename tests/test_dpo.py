"""FINER-Tuning DPO through the real entry point (``finetune/dpo.py``) on tiny offline models.

One tiny LoRA run (Qwen3-VL, W&B offline, eval loss on the validation split) is shared by the tests that
inspect what it wrote; a full-parameter run uses Qwen2.5-VL, so nothing is Qwen3-specific.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import REPO_ROOT, entry_env, log_history, run_entry
from PIL import Image
from safetensors.torch import load_file
from wandb_offline import offline_history

from core.errors import UserError
from core.sampling import sample_indices
from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
from finetune.dpo_data import DATA_REPORT_FILE, get_preference_datasets
from finetune.recipe import parse_recipe

DPO_TYPES = (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
PAIRS = [("dog", "cat"), ("bench", "sofa"), ("cup", "bowl"), ("kite", "clock"), ("car", "bus"), ("apple", "orange")]
# Tiny Qwen3-VL text model: hidden 64, 4 query heads and 2 key/value heads of 16, 2 layers. LoRA rank 8 on
# q_proj (64 -> 64) and v_proj (64 -> 32): 8 * (64 + 64) + 8 * (64 + 32) = 1,792 per layer.
TINY_QWEN3VL_LORA_PARAMETERS = 2 * (8 * (64 + 64) + 8 * (64 + 32))
# About 590 tokens with the tiny tokenizer, beyond the tiny recipe's max_length of 256
LONG_ANSWER = "Yes, " + " ".join(["there is a small brown dog sitting on the bench"] * 40)


# ---- data in the official layouts


def write_images(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        Image.new("RGB", (64, 48), (index * 20 % 256, 80, 140)).save(root / f"{index}.jpg")
    return root


def yes_no_tuple(index: int, polarity: str) -> tuple[str, str, str]:
    """(question, chosen, rejected) in FINER's template 4 (App. G) for object pair ``index``."""
    real, fake = PAIRS[index % len(PAIRS)]
    if polarity == "pos":
        return (
            f"Can you see a {real} in this image?",
            f"Yes, I can see a {real} in this image.",
            f"No, but I can see a {fake} in this image.",
        )
    return (
        f"Can you see a {fake} in this image?",
        f"No, but I can see a {real} in this image.",
        f"Yes, I can see a {fake} in this image.",
    )


def veritune_row(image: str, question: str, chosen: str, rejected: str, polarity: str) -> dict[str, Any]:
    """One row of a `veritune build finer` directory (docs/DATA_FORMATS.md)."""
    return {
        "images": [image],
        "prompt": [{"role": "user", "content": question}],
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
        "subset": "obj",
        "polarity": polarity,
        "template_id": 4,
    }


def finer_release_row(image: str, question: str, chosen: str, rejected: str, polarity: str) -> dict[str, Any]:
    """One row of the FINER-Tuning release (LLaMA-Factory's sharegpt DPO layout)."""
    return {
        "conversations": [{"from": "human", "value": f"<image>\n{question}"}],
        "chosen": {"from": "gpt", "value": chosen},
        "rejected": {"from": "gpt", "value": rejected},
        "images": [image],
        "meta": {"qa_type": "obj", "polarity": polarity},
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def preference_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `veritune build finer` directory: 22 good training rows plus one whose chosen equals its rejected,
    one whose image is missing and one whose chosen answer is longer than the tiny recipe's max_length; 2
    validation rows."""
    root = tmp_path_factory.mktemp("finer")
    images = write_images(root / "images", 12)
    rows = [
        veritune_row(f"{i}.jpg", *yes_no_tuple(i, polarity), polarity) for i in range(12) for polarity in ("pos", "neg")
    ]
    train, validation = rows[:22], rows[22:]
    train.insert(5, veritune_row("3.jpg", "Can you see a dog in this image?", "Yes.", "Yes.", "pos"))
    train.insert(9, veritune_row("gone.jpg", *yes_no_tuple(0, "pos"), "pos"))
    train.insert(14, veritune_row("4.jpg", "Can you see a dog in this image?", LONG_ANSWER, "No.", "pos"))
    data = root / "data"
    data.mkdir()
    write_jsonl(data / "train.jsonl", train)
    write_jsonl(data / "validation.jsonl", validation)
    (data / "manifest.json").write_text(json.dumps({"image_root": str(images)}))
    return data


def parse_tiny(*flags: str | Path) -> tuple[DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig]:
    return parse_recipe(["recipes/miniature/tiny_finer_demo.yaml", *map(str, flags)], DPO_TYPES)


# ---- the LoRA run


@pytest.fixture(scope="module")
def lora_run(tiny_qwen3vl: Path, preference_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """4 LoRA steps of the tiny recipe as written (W&B offline), the eval loss every 2 steps."""
    out = tmp_path_factory.mktemp("dpo-lora") / "run"
    # W&B not silenced, as a user runs it: what it prints at the end is part of the console (test below)
    result = run_entry(
        "dpo.py", *lora_command(tiny_qwen3vl, preference_dir, out), WANDB_MODE="offline", WANDB_SILENT="false"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stdout + result.stderr


def lora_command(model: Path, data: Path, out: Path) -> list[str | Path]:
    return [
        "recipes/miniature/tiny_finer_demo.yaml",
        "--model_name_or_path",
        model,
        "--dataset_path",
        data,
        "--output_dir",
        out,
        "--max_steps",
        "4",
        "--save_steps",
        "2",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "2",
    ]


def test_the_finished_run_rerun_is_reported_and_not_trained_again(
    lora_run: tuple[Path, str], tiny_qwen3vl: Path, preference_dir: Path
) -> None:
    out = lora_run[0]
    before = {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}
    result = run_entry("dpo.py", *lora_command(tiny_qwen3vl, preference_dir, out), WANDB_MODE="offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already holds this run, finished at step 4 of 4: nothing to do" in result.stderr
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()} == before


def test_lora_run_logs_loss_and_reward_margins(lora_run: tuple[Path, str]) -> None:
    train_rows = [row for row in log_history(lora_run[0]) if "loss" in row]
    assert [row["step"] for row in train_rows] == [1, 2, 3, 4]
    assert all("rewards/margins" in row and "rewards/accuracies" in row for row in train_rows)
    assert any(row["rewards/margins"] != 0 for row in train_rows)  # the policy moved away from the reference


def test_lora_run_logs_eval_loss_on_the_validation_split(lora_run: tuple[Path, str]) -> None:
    eval_rows = [row for row in log_history(lora_run[0]) if "eval_loss" in row]
    assert [row["step"] for row in eval_rows] == [2, 4]
    assert json.loads((lora_run[0] / DATA_REPORT_FILE).read_text())["eval"]["rows"] == 2


def test_lora_run_logs_the_trainable_parameter_count(lora_run: tuple[Path, str]) -> None:
    assert "LoRA training of" in lora_run[1]
    assert f"{TINY_QWEN3VL_LORA_PARAMETERS:,} trainable of" in lora_run[1]


def test_lora_run_optimizes_only_adapter_parameters(lora_run: tuple[Path, str]) -> None:
    optimizer = torch.load(lora_run[0] / "checkpoint-4" / "optimizer.pt", weights_only=True)
    moments = [state["exp_avg"] for state in optimizer["state"].values()]
    assert len(moments) == 2 * 2 * 2  # (lora_A, lora_B) x (q_proj, v_proj) x 2 layers
    assert sum(m.numel() for m in moments) == TINY_QWEN3VL_LORA_PARAMETERS


def test_adapter_holds_only_language_model_q_and_v(lora_run: tuple[Path, str]) -> None:
    adapter = load_file(lora_run[0] / "adapter_model.safetensors")
    modules = {key.rsplit(".lora_", 1)[0] for key in adapter}
    assert modules == {
        f"base_model.model.model.language_model.layers.{layer}.self_attn.{proj}"
        for layer in (0, 1)
        for proj in ("q_proj", "v_proj")
    }
    assert all(adapter[key].abs().sum() > 0 for key in adapter if ".lora_B." in key)  # B starts at zero: it was trained


def test_vision_tower_untouched(lora_run: tuple[Path, str], tiny_qwen3vl: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl).state_dict()
    merged = (
        PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl), lora_run[0])
        .merge_and_unload()
        .state_dict()
    )
    assert merged.keys() == base.keys()
    changed = {key for key in base if not torch.equal(base[key], merged[key])}
    assert changed == {
        f"model.language_model.layers.{layer}.self_attn.{proj}.weight"
        for layer in (0, 1)
        for proj in ("q_proj", "v_proj")
    }
    assert all(torch.equal(base[key], merged[key]) for key in base if key.startswith("model.visual."))


def test_adapter_reloads_with_peft(lora_run: tuple[Path, str], tiny_qwen3vl: Path) -> None:
    from peft import PeftModel, get_peft_model_state_dict
    from transformers import AutoModelForImageTextToText

    model = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl), lora_run[0]).eval()
    saved = load_file(lora_run[0] / "adapter_model.safetensors")
    loaded = get_peft_model_state_dict(model)
    assert loaded.keys() == saved.keys() and all(torch.equal(loaded[key], saved[key]) for key in saved)
    input_ids = torch.tensor([[10, 20, 30, 40]])
    with torch.no_grad():
        adapted = model(input_ids=input_ids).logits
        with model.disable_adapter():
            reference = model(input_ids=input_ids).logits
    assert not torch.allclose(adapted, reference)


def test_lora_run_drops_bad_rows_once_and_lists_missing_images(
    lora_run: tuple[Path, str], preference_dir: Path
) -> None:
    report = json.loads((lora_run[0] / DATA_REPORT_FILE).read_text())["train"]
    assert (report["read"], report["kept"], report["rows"]) == (25, 23, 22)
    assert report["dropped"] == {"chosen_equals_rejected": 1, "missing_image": 1}
    assert [Path(p).name for p in report["missing_images"]] == ["gone.jpg"]
    assert "gone.jpg" in lora_run[1]  # logged too


def test_lora_run_drops_and_counts_rows_longer_than_max_length(lora_run: tuple[Path, str]) -> None:
    """TRL's collator cuts a row at max_length (through its answer, or its image tokens): such a row is not
    trained on but dropped, and counted in the data report and the run's data line."""
    report = json.loads((lora_run[0] / DATA_REPORT_FILE).read_text())
    assert (report["train"]["rows"], report["train"]["longer_than_max_length"]) == (22, 1)
    assert (report["eval"]["rows"], report["eval"]["longer_than_max_length"]) == (2, 0)
    assert "22 training tuples, 2 validation" in lora_run[1]
    assert "1 longer than max_length 256 dropped" in lora_run[1]


def test_a_run_ends_with_its_own_summary_and_the_models_path(lora_run: tuple[Path, str]) -> None:
    """W&B's sampled history and summary stay off the console, and so do the bars transformers draws for each
    model it loads or saves; the run's last line says where the model is."""
    console = lora_run[1]
    for noise in ("Run history:", "Run summary:", "Loading weights", "Writing model shards"):
        assert noise not in console, console[-3000:]
    assert console.strip().splitlines()[-1].endswith(f"model saved to {lora_run[0]}"), console[-3000:]


def test_lora_run_metrics_reach_offline_wandb(lora_run: tuple[Path, str]) -> None:
    rows = offline_history(lora_run[0] / "wandb")
    assert any("train/rewards/margins" in row for row in rows)
    assert any("eval/loss" in row for row in rows)


# ---- other runs


def test_full_parameter_dpo_on_qwen25vl(tiny_qwen25vl: Path, preference_dir: Path, tmp_path: Path) -> None:
    result = run_entry(
        "dpo.py",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--model_name_or_path",
        tiny_qwen25vl,
        "--dataset_path",
        preference_dir,
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--use_peft",
        "false",
        "--learning_rate",
        "1e-3",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "full-parameter training of" in result.stderr and "(100.00%)" in result.stderr
    from transformers import AutoModelForImageTextToText

    before = AutoModelForImageTextToText.from_pretrained(tiny_qwen25vl).state_dict()
    after = AutoModelForImageTextToText.from_pretrained(tmp_path / "run").state_dict()
    assert after.keys() == before.keys()
    changed = [key for key in before if not torch.equal(before[key], after[key])]
    assert any(key.startswith("model.language_model.") for key in changed)
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and "rewards/margins" in state["log_history"][0]


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_two_processes_keep_the_global_batch(tiny_qwen3vl: Path, preference_dir: Path, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "recipes/accelerate/ddp.yaml",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        free_port(),
        "finetune/dpo.py",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--model_name_or_path",
        str(tiny_qwen3vl),
        "--dataset_path",
        str(preference_dir),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--per_device_train_batch_size",
        "1",
        "--global_batch_size",
        "4",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gradient_accumulation_steps 1 -> 2: keeps the global batch at 4 on 2 process(es)" in result.stderr
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and "rewards/margins" in state["log_history"][0]
    assert state["log_history"][-1]["epoch"] == pytest.approx(2 * 4 / 22)  # 2 steps of 4 tuples out of 22


def test_entry_point_bad_dataset_is_one_line(tmp_path: Path) -> None:
    result = run_entry(
        "dpo.py",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--dataset_path",
        tmp_path / "nope.jsonl",
        "--output_dir",
        tmp_path / "run",
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"error: dataset_path: {tmp_path / 'nope.jsonl'}: no such file"
    assert "Traceback" not in result.stderr


# ---- data preparation, no model


def test_release_file_holds_out_the_validation_ratio(tmp_path: Path) -> None:
    images = write_images(tmp_path / "images", 4)
    rows = [
        finer_release_row(
            f"{i % 4}.jpg",
            f"Can you see thing {i} in this image?",
            "Yes, I can.",
            f"No, but I can see thing {i + 1}.",
            "pos",
        )
        for i in range(40)
    ]
    path = write_jsonl(images / "finer.jsonl", rows)
    script_args, training_args, _ = parse_tiny(
        "--dataset_path", path, "--eval_strategy", "steps", "--validation_ratio", "0.05"
    )
    train, evaluation, report = get_preference_datasets(script_args, training_args)
    assert (len(train), len(evaluation)) == (38, 2)
    assert report["eval"] == {"rows": 2, "held_out_of_train": True}
    questions = lambda d: {row["prompt"][0]["content"][-1]["text"] for row in d}  # noqa: E731
    assert not questions(train) & questions(evaluation)


def test_rows_come_with_images_scaled_to_max_pixels(preference_dir: Path) -> None:
    script_args, training_args, _ = parse_tiny("--dataset_path", preference_dir, "--max_pixels", "768")
    train, evaluation, _ = get_preference_datasets(script_args, training_args)
    image = train[0]["images"][0]
    assert isinstance(image, Image.Image) and image.width * image.height <= 768 and image.size == (32, 24)
    assert evaluation is None  # eval_strategy is "no" in the tiny recipe


def test_max_train_samples_draws_uniformly_not_the_first_rows() -> None:
    picked = sample_indices(1000, 100, seed=42)
    assert len(set(picked)) == 100 and picked == sorted(picked)
    assert picked == sample_indices(1000, 100, seed=42) and picked != sample_indices(1000, 100, seed=0)
    assert max(picked) > 900 and min(picked) < 100


def test_max_train_samples_applies_after_the_reader_drops(preference_dir: Path) -> None:
    script_args, training_args, _ = parse_tiny("--dataset_path", preference_dir, "--max_train_samples", "10")
    train, _, report = get_preference_datasets(script_args, training_args)
    assert len(train) == 10 and report["train"]["kept"] == 23


def test_only_equal_answers_is_an_error_naming_the_file(tmp_path: Path) -> None:
    write_images(tmp_path, 1)
    path = write_jsonl(tmp_path / "same.jsonl", [finer_release_row("0.jpg", "Is there a dog?", "Yes.", "Yes.", "pos")])
    script_args, training_args, _ = parse_tiny("--dataset_path", path)
    with pytest.raises(
        UserError,
        match=(
            r"same.jsonl: no usable preference rows "
            r"\(0/1 preference rows kept; dropped: \{'chosen_equals_rejected': 1\}\)"
        ),
    ):
        get_preference_datasets(script_args, training_args)


def test_missing_dataset_path_is_an_error() -> None:
    script_args, training_args, _ = parse_tiny("--dataset_path", "")
    with pytest.raises(UserError, match="dataset_path: required"):
        get_preference_datasets(script_args, training_args)


def test_max_length_that_fits_no_row_is_an_error_naming_the_longest(preference_dir: Path, tiny_qwen3vl: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    script_args, training_args, _ = parse_tiny("--dataset_path", preference_dir, "--max_length", "20")
    with pytest.raises(
        UserError,
        match=r"max_length: 20 tokens fits none of the 23 train rows \(the longest, images included, is \d+ tokens\)",
    ):
        get_preference_datasets(script_args, training_args, lambda: processor)


def test_an_unreadable_image_is_an_error_naming_it(tmp_path: Path, tiny_qwen3vl: Path) -> None:
    from transformers import AutoProcessor

    write_images(tmp_path, 1)
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    rows = [finer_release_row(f"{name}.jpg", *yes_no_tuple(0, "pos"), "pos") for name in ("0", "broken")]
    script_args, training_args, _ = parse_tiny("--dataset_path", write_jsonl(tmp_path / "finer.jsonl", rows))
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    with pytest.raises(UserError, match=r"broken.jpg: unreadable image \(UnidentifiedImageError\)"):
        get_preference_datasets(script_args, training_args, lambda: processor)


def test_measured_lengths_are_the_collators(tiny_qwen3vl: Path) -> None:
    """What the length check measures, without processing any image, is what TRL's collator builds."""
    import copy

    from transformers import AutoProcessor
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    from finetune.token_lengths import PreferenceLengths

    processor = AutoProcessor.from_pretrained(tiny_qwen3vl, padding_side="left")
    text = lambda words: [{"type": "text", "text": words}]  # noqa: E731
    row = {  # a row as the reader writes it and Arrow gives it back
        "prompt": [{"role": "user", "content": [{"type": "image", "text": None}, *text("Can you see a dog?")]}],
        "chosen": [{"role": "assistant", "content": text("Yes.")}],
        "rejected": [{"role": "assistant", "content": text(LONG_ANSWER[:80])}],
    }
    sizes = [(64, 48), (640, 480), (300, 900), (33, 17)]
    measured = PreferenceLengths(processor)([row] * len(sizes), [[size] for size in sizes])
    batch = DataCollatorForVisionPreference(processor=processor)(
        [{**copy.deepcopy(row), "images": [Image.new("RGB", size)]} for size in sizes]
    )
    built = batch["attention_mask"].sum(dim=1).tolist()
    assert measured == [max(built[i], built[i + len(sizes)]) for i in range(len(sizes))]
    assert len(set(measured)) > 1  # the image tokens differ with the size


def test_lora_targets_skip_vision_towers_that_share_the_names() -> None:
    """InternVL and LLaVA-NeXT name their vision attention q_proj/v_proj too: a plain suffix match wraps them."""
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText, InternVLConfig, LlavaNextConfig

    from finetune.models import get_lora_config

    text = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 128,
    }
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    configs = [
        InternVLConfig(
            vision_config={**vision, "image_size": [28, 28], "patch_size": [14, 14]},
            text_config={"model_type": "qwen3", **text},
        ),
        LlavaNextConfig(
            vision_config={"model_type": "clip_vision_model", **vision, "image_size": 28, "patch_size": 14},
            text_config={"model_type": "llama", **text},
            image_grid_pinpoints=[[28, 28]],
        ),
    ]
    for config in configs:
        wrapped = {}
        for language_model_only in (False, True):
            model_args = VerituneModelConfig(
                model_name_or_path="tiny",
                use_peft=True,
                lora_r=4,
                lora_target_modules=["q_proj", "v_proj"],
                lora_language_model_only=language_model_only,
            )
            torch.manual_seed(0)
            model = get_peft_model(AutoModelForImageTextToText.from_config(config), get_lora_config(model_args))
            wrapped[language_model_only] = {name for name, module in model.named_modules() if hasattr(module, "lora_A")}
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert any("vision_tower" in name for name in wrapped[False]), config.model_type  # the hazard is real
        assert wrapped[True] == {name for name in wrapped[False] if "language_model" in name}
        assert trainable == 4 * (64 + 64) + 4 * (64 + 32)  # q_proj and v_proj of the one language-model layer
