"""FINER-Tuning: tuples from a hand-written scene graph, the preference readers, and DPO training."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import log_history, run_entry
from PIL import Image
from safetensors.torch import load_file

from data_builders.finer.build import build_finer_from_scene_graphs
from data_builders.finer.formats import read_preference_rows
from data_builders.finer.scene_graph import tuples_for_image
from data_builders.finer.templates import TEMPLATES
from finetune.configs import DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig
from finetune.recipe import parse_recipe
from veritune.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
GRAPH = {
    "image": "dog.jpg",
    "objects": [
        {"id": "o1", "name": "dog", "negatives": ["cat"], "attributes": [{"value": "brown", "negatives": ["white"]},
                                                                          {"value": "with floppy ears", "negatives": ["with pointed ears"]}]},
        {"id": "o2", "name": "bench", "negatives": ["sofa"], "attributes": []},
    ],
    "relations": [{"object_a": "o1", "rel": "is next to", "object_b": "o2", "negatives": ["is under"]}],
}  # fmt: skip


class FixedRandom(random.Random):
    """Draws the first option and the first template every time, so the expected text is known."""

    def randrange(self, *args):  # noqa: D102
        return 0

    def choice(self, seq):  # noqa: D102
        return seq[0]

    def sample(self, population, k):  # noqa: D102
        return list(population)[:k]


def test_scene_graph_tuples_are_exact() -> None:
    tuples = tuples_for_image(GRAPH, FixedRandom(), Counter())
    got = {(t.subset, t.polarity): (t.question, t.chosen, t.rejected) for t in tuples}
    assert len(tuples) == 8
    assert got[("obj", "pos")] == ("Does this image contain a dog and a bench?", "Yes, this image contains a dog and a bench.",
                                   "No, but this image contains a cat and a bench.")  # fmt: skip
    assert got[("obj", "neg")] == ("Does this image contain a cat and a bench?", "No, but this image contains a dog and a bench.",
                                   "Yes, this image contains a cat and a bench.")  # fmt: skip
    assert got[("attr", "pos")][0] == "Does this image contain the white dog with floppy ears?".replace("white", "brown")
    assert got[("attr", "neg")][0] == "Does this image contain the white dog with floppy ears?"
    assert got[("rel", "pos")][1] == "Yes, this image contains the dog that is next to the bench."
    assert got[("rel", "neg")][0] == "Does this image contain the dog that is under the bench?"
    # WH, symmetrised: a-+ := a+- and a-- := a++
    assert got[("wh", "pos")] == ("What is next to the bench?", "The dog is next to the bench.",
                                  "Nothing is under the bench, but the dog is next to the bench.")  # fmt: skip
    assert got[("wh", "neg")] == ("What is under the bench?", "Nothing is under the bench, but the dog is next to the bench.",
                                  "The dog is next to the bench.")  # fmt: skip


def test_templates_are_the_five_of_the_paper() -> None:
    assert len(TEMPLATES) == 5
    assert TEMPLATES[3] == ("Can you see {x} in this image?", "Yes, I can see {y} in this image.", "No, but I can see {z} in this image.")


@pytest.fixture()
def finer_data(tmp_path: Path) -> tuple[Path, Path]:
    images = tmp_path / "images"
    images.mkdir()
    graphs = []
    for index in range(12):
        Image.new("RGB", (64, 48), (index * 20, 100, 140)).save(images / f"{index}.jpg")
        graphs.append({**GRAPH, "image": f"{index}.jpg"})
    path = tmp_path / "graphs.json"
    path.write_text(json.dumps(graphs))
    return path, images


def test_build_writes_trl_preference_format(finer_data: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = finer_data
    manifest = build_finer_from_scene_graphs(graphs, images, tmp_path / "out", max_tuples=50, seed=1)
    assert manifest["counts"]["train"] + manifest["counts"]["validation"] == 50
    assert manifest["counts"]["validation"] == 1  # 0.5%, at least one row
    row = json.loads((tmp_path / "out" / "train.jsonl").read_text().splitlines()[0])
    assert set(row) == {"images", "prompt", "chosen", "rejected", "subset", "polarity", "template_id"}
    assert row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant"
    rows, report = read_preference_rows(tmp_path / "out")
    assert report.kept == 49 and Path(rows[0]["image_paths"][0]).is_file()


def test_missing_images_and_dangling_relations(finer_data: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = finer_data
    (images / "3.jpg").unlink()
    manifest = build_finer_from_scene_graphs(graphs, images, tmp_path / "out")
    assert manifest["skipped"]["missing_image"] == 1 and manifest["missing_images"] == ["3.jpg"]
    bad = dict(GRAPH, relations=[{"object_a": "o1", "rel": "is on", "object_b": "o9", "negatives": []}])
    graphs.write_text(json.dumps([bad]))
    with pytest.raises(UserError, match="record 0 \\(dog.jpg\\): relation 'is on' points to missing object 'o9'"):
        build_finer_from_scene_graphs(graphs, images, tmp_path / "out2")


def test_official_finer_and_rlaif_rows(tmp_path: Path) -> None:
    Image.new("RGB", (8, 8)).save(tmp_path / "a.jpg")
    finer = {"conversations": [{"from": "human", "value": "<image>Is there a cat?"}], "chosen": {"from": "gpt", "value": "No, but a dog."},
             "rejected": {"from": "gpt", "value": "Yes, a cat."}, "images": ["a.jpg"], "meta": {"qa_type": "obj", "polarity": "neg"}}  # fmt: skip
    same = dict(finer, rejected={"from": "gpt", "value": "No, but a dog."})
    missing = dict(finer, images=["nope.jpg"])
    (tmp_path / "finer.jsonl").write_text("\n".join(json.dumps(r) for r in (finer, same, missing)))
    rows, report = read_preference_rows(tmp_path / "finer.jsonl")
    assert len(rows) == 1 and rows[0]["prompt"] == [{"role": "user", "content": "Is there a cat?"}]
    assert rows[0]["subset"] == "obj" and report.dropped == {"chosen_equals_rejected": 1, "missing_image": 1}
    rlaif = {"image": "a.jpg", "question": "Describe.", "chosen": "A box.", "rejected": "A cat."}
    (tmp_path / "rlaif.jsonl").write_text(json.dumps(rlaif))
    rows, _ = read_preference_rows(tmp_path / "rlaif.jsonl")
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "A box."}]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"foo": 1}))
    with pytest.raises(UserError, match="unknown preference format"):
        read_preference_rows(tmp_path / "bad.jsonl")


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
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * gpus == 64
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
