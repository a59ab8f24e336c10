"""FINER-Tuning DPO training on tuples from a hand-written scene graph (the builders and readers are tested
in test_finer_builder.py, test_finer_llm.py, test_finer_formats.py and test_finer_filter.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import log_history, run_entry
from PIL import Image
from safetensors.torch import load_file
from test_finer_builder import GRAPH

from data_builders.finer.build import build_finer_from_scene_graphs
from finetune.configs import DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig
from finetune.recipe import parse_recipe
from veritune.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent


# ---- DPO training

TABLE_10 = {  # recipe: (model, tuples, GPUs)
    "qwen25vl_7b_finer_lora": ("Qwen/Qwen2.5-VL-7B-Instruct", 120_000, 2),
    "internvl35_8b_finer_lora": ("OpenGVLab/InternVL3_5-8B-HF", 160_000, 2),
    "internvl35_14b_finer_lora": ("OpenGVLab/InternVL3_5-14B-HF", 160_000, 4),
    "llava16_7b_finer_lora": ("llava-hf/llava-v1.6-vicuna-7b-hf", 40_000, 2),
    "qwen3vl_8b_finer_lora": ("Qwen/Qwen3-VL-8B-Instruct", 160_000, 2),
}


@pytest.mark.parametrize("name", sorted(TABLE_10))
def test_table_10_recipes(name: str) -> None:
    script, args, model = parse_recipe([f"recipes/{name}.yaml", "--use_cpu", "true"], (DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig))
    hub_id, tuples, gpus = TABLE_10[name]
    assert model.model_name_or_path == hub_id and script.max_train_samples == tuples
    assert args.global_batch_size == 64  # gradient accumulation follows the number of processes
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size == 64
    assert 64 % (args.per_device_train_batch_size * gpus) == 0  # the GPU count of Table 10 divides it
    assert (args.learning_rate, args.num_train_epochs, args.warmup_steps, args.lr_scheduler_type) == (5e-6, 1, 0.1, "cosine")
    assert (args.beta, args.loss_type, args.optim, args.bf16) == (0.1, ["sigmoid"], "adamw_torch", True)
    assert (model.use_peft, model.lora_r, model.lora_target_modules, model.lora_language_model_only) == (True, 32, ["q_proj", "v_proj"], True)


def test_full_parameter_recipe_uses_zero3() -> None:
    script, args, model = parse_recipe(["recipes/qwen3vl_8b_finer_full.yaml", "--use_cpu", "true"], (DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig))
    assert not model.use_peft and script.accelerate_config == "recipes/accelerate/zero3.yaml"


def test_precomputed_reference_log_probs_are_refused() -> None:
    with pytest.raises(UserError, match="precompute_ref_log_probs: not supported"):
        parse_recipe(["recipes/tiny_finer_demo.yaml", "--precompute_ref_log_probs", "true"], (DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig))


@pytest.fixture(scope="module")
def finer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("finer")
    images = root / "images"
    images.mkdir()
    graphs = []
    for index in range(16):
        Image.new("RGB", (64, 48), (index * 15, 80, 120)).save(images / f"{index}.jpg")
        graphs.append({**GRAPH, "image": f"{index}.jpg"})
    (root / "graphs.json").write_text(json.dumps(graphs))
    build_finer_from_scene_graphs(root / "graphs.json", images, root / "data", seed=0)
    return root / "data"


def test_lora_dpo_changes_only_the_adapter(tiny_qwen3vl: Path, finer_dir: Path, tmp_path: Path) -> None:
    result = run_entry("dpo.py", "recipes/tiny_finer_demo.yaml", "--model_name_or_path", tiny_qwen3vl, "--dataset_path", finer_dir,
                       "--output_dir", tmp_path / "run", "--max_steps", "4", "--save_steps", "2", "--report_to", "none")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    history = log_history(tmp_path / "run")
    assert all("rewards/margins" in row and "loss" in row for row in history if "loss" in row)
    assert "trainable" in result.stderr
    adapter = load_file(tmp_path / "run" / "adapter_model.safetensors")
    assert adapter and all("language_model" in k and ("q_proj" in k or "v_proj" in k) for k in adapter)
    assert not any("visual" in k for k in adapter)  # the vision tower carries no adapter
    assert any(not torch.all(v == 0) for k, v in adapter.items() if "lora_B" in k)  # the adapter was trained

    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    PeftModel.from_pretrained(base, tmp_path / "run")  # reloadable
    merged_base = {k: v for k, v in base.state_dict().items() if "lora" not in k}
    assert all(torch.equal(before[k.replace("base_layer.", "")], v) for k, v in merged_base.items() if k.replace("base_layer.", "") in before)


def test_full_parameter_dpo(tiny_qwen25vl: Path, finer_dir: Path, tmp_path: Path) -> None:
    result = run_entry("dpo.py", "recipes/tiny_finer_demo.yaml", "--model_name_or_path", tiny_qwen25vl, "--dataset_path", finer_dir,
                       "--output_dir", tmp_path / "run", "--max_steps", "2", "--save_strategy", "no", "--report_to", "none",
                       "--use_peft", "false", "--learning_rate", "1e-3")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    from transformers import AutoModelForImageTextToText

    before = AutoModelForImageTextToText.from_pretrained(tiny_qwen25vl).state_dict()
    after = AutoModelForImageTextToText.from_pretrained(tmp_path / "run").state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before if "language_model" in k)
