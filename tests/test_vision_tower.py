"""A vision tower that sees per-instance attributes: ``freeze_vision_tower`` on every trainer's model,
FINER-worded attribute pairs in the SFT warm-start's table (miniature/warmstart_data.py), and the tiny models'
vision-tower pretraining."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers import run_entry
from safetensors.torch import load_file

from core.errors import UserError
from core.finer_yn import QUESTION
from finetune.configs import VerituneModelConfig
from finetune.models import freeze_vision_tower, get_model, vision_modules
from finetune.sft import SFTScriptArguments
from miniature.warmstart_data import WarmstartSettings, attribute_pair_examples, warmstart_examples
from miniature.world import build_synthetic_world


@pytest.fixture(scope="module")
def drawn_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny synthetic world whose objects carry shade, border and pattern (scene graphs' attribute slots)."""
    return build_synthetic_world(
        tmp_path_factory.mktemp("drawn"), num_train_images=8, num_val_images=6, seed=3, instance_attributes="drawn"
    )


@pytest.mark.parametrize("fixture", ["tiny_qwen3vl", "tiny_qwen25vl"])
def test_freeze_vision_tower_freezes_the_tower_and_its_merger_only(
    fixture: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    path = request.getfixturevalue(fixture)
    with caplog.at_level(logging.INFO, logger="finetune.models"):
        model = get_model(VerituneModelConfig(model_name_or_path=str(path), freeze_vision_tower=True))
    assert [name for name, _ in vision_modules(model)] == ["model.visual"]
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {name for name, _ in model.named_parameters() if name.startswith("model.visual.")}
    assert any(".merger." in name for name in frozen)  # the merger (projector into the LM) is part of the tower
    assert any(name.startswith("model.language_model.") for name, p in model.named_parameters() if p.requires_grad)
    count = sum(p.numel() for name, p in model.named_parameters() if name in frozen)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("freeze_vision_tower")]
    assert lines == [f"freeze_vision_tower: {count} parameters frozen (model.visual); the language model trains"]
    unfrozen = get_model(VerituneModelConfig(model_name_or_path=str(path)))
    assert all(p.requires_grad for p in unfrozen.parameters())  # off by default


def test_freeze_vision_tower_refuses_a_model_without_one() -> None:
    language_only = torch.nn.Sequential()
    language_only.add_module("language_model", torch.nn.Linear(2, 2))
    with pytest.raises(UserError, match=r"freeze_vision_tower: Sequential has no vision tower veritune recognises"):
        freeze_vision_tower(language_only)


def test_freeze_vision_tower_with_lora_keeps_the_adapters_on_the_language_model() -> None:
    VerituneModelConfig(freeze_vision_tower=True, use_peft=True)  # LoRA on the LM only: allowed (nothing to freeze)
    with pytest.raises(UserError, match="freeze_vision_tower: with use_peft and lora_language_model_only: false"):
        VerituneModelConfig(freeze_vision_tower=True, use_peft=True, lora_language_model_only=False)


def test_attribute_pairs_ask_finer_probe_questions_about_drawn_attributes(drawn_world: dict[str, Path]) -> None:
    graphs = json.loads(drawn_world["train_scene_graphs"].read_text())
    images = drawn_world["train_images"]
    examples, counts = attribute_pair_examples(
        drawn_world["train_scene_graphs"], images, per_image=2, slots=None, seed=7
    )
    usable = {  # per image and slot: the objects with a negative for the slot
        (g["image"], slot): [o for o in g["objects"] if o["neg_attribute"][slot]] for g in graphs for slot in range(3)
    }
    assert counts == {slot: sum(min(2, len(v)) for (_, s), v in usable.items() if s == slot) for slot in range(3)}
    assert len(examples) == 2 * sum(counts.values()) and all(counts.values())
    by_question = {}
    for image_file, slot in usable:
        for obj in usable[image_file, slot]:
            by_question[image_file, QUESTION.format(x=f"{obj['object']} {obj['attribute'][slot]}")] = "Yes."
            by_question[image_file, QUESTION.format(x=f"{obj['object']} {obj['neg_attribute'][slot][0]}")] = "No."
    for example in examples:
        key = (example["images"][0], example["prompt"][0]["content"])
        assert example["completion"] == [{"role": "assistant", "content": by_question[key]}], key
    yes = [e for e in examples if e["completion"][0]["content"] == "Yes."]
    assert len(yes) == len(examples) / 2
    assert any("with a white border in this image?" in e["prompt"][0]["content"] for e in examples)
    again, _ = attribute_pair_examples(drawn_world["train_scene_graphs"], images, per_image=2, slots=None, seed=7)
    assert again == examples  # seeded
    border_only, border_counts = attribute_pair_examples(
        drawn_world["train_scene_graphs"], images, per_image=1, slots=[1], seed=7
    )
    assert list(border_counts) == [1] and all(
        " border in this image?" in e["prompt"][0]["content"] for e in border_only
    )
    with pytest.raises(UserError, match="--attribute-pair-slots: slot 3 is not in .* at most 3 attributes"):
        attribute_pair_examples(drawn_world["train_scene_graphs"], images, per_image=1, slots=[3], seed=7)


def test_attribute_pairs_join_the_conventional_examples_shuffled(drawn_world: dict[str, Path]) -> None:
    def rows(pairs: int) -> tuple[list[dict], dict]:
        settings = WarmstartSettings(attribute_pairs_per_image=pairs, attribute_pair_slots=(0, 2), seed=0)
        return warmstart_examples(drawn_world["train_annotations"], drawn_world["train_images"], settings)

    (conventional, _), (mixed, counts) = rows(0), rows(1)
    pairs, per_slot = attribute_pair_examples(
        drawn_world["train_scene_graphs"], drawn_world["train_images"], per_image=1, slots=[0, 2], seed=1
    )
    assert sorted(map(json.dumps, mixed)) == sorted(map(json.dumps, conventional + pairs))
    assert mixed[: len(conventional)] != conventional  # shuffled together
    line = f"attribute pairs: {len(pairs)} questions ({len(pairs) // 2} pairs; per slot 0: {per_slot[0]}, "
    line += f"2: {per_slot[2]})"
    assert counts["summary"].startswith(line) and counts["summary"].endswith(f"added to {len(conventional)} examples")
    assert counts["attribute_pairs_by_slot"] == {"0": per_slot[0], "2": per_slot[2]}


def test_the_attribute_flags_and_the_old_recipe_keys(drawn_world: dict[str, Path], tmp_path: Path) -> None:
    """The builder takes the slots (default: every slot), refuses a negative count, and the SFT recipe no longer
    has the generation keys: a recipe that still sets one is refused naming it."""
    from trl import SFTConfig

    from finetune.recipe import parse_recipe
    from veritune.cli import main

    command = ["build", "warmstart-data", "--annotations", str(drawn_world["train_annotations"])]
    command += ["--image-root", str(drawn_world["train_images"]), "--attribute-pairs-per-image", "1"]
    assert main([*command, "--out", str(tmp_path / "some.jsonl"), "--attribute-pair-slots", "0", "2"]) == 0
    assert main([*command, "--out", str(tmp_path / "every.jsonl")]) == 0
    some, every = (json.loads((tmp_path / f"{name}.manifest.json").read_text()) for name in ("some", "every"))
    assert some["settings"]["attribute_pair_slots"] == [0, 2]
    assert list(some["counts"]["attribute_pairs_by_slot"]) == ["0", "2"]
    assert every["settings"]["attribute_pair_slots"] is None
    assert list(every["counts"]["attribute_pairs_by_slot"]) == ["0", "1", "2"]
    with pytest.raises(UserError, match="--attribute-pairs-per-image: must be at least 0, got -1"):
        WarmstartSettings(attribute_pairs_per_image=-1).check()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        Path("recipes/miniature/tiny_sft_warmstart.yaml").read_text() + "\nattribute_pairs_per_image: 3\n"
    )
    with pytest.raises(UserError, match="unknown key 'attribute_pairs_per_image'"):
        parse_recipe([str(recipe)], (SFTScriptArguments, SFTConfig, VerituneModelConfig))


def test_sft_with_a_frozen_tower_and_attribute_pairs_keeps_the_vision_weights(
    tiny_qwen3vl: Path, drawn_world: dict[str, Path], tmp_path: Path
) -> None:
    from veritune.cli import main

    table = tmp_path / "train.jsonl"
    command = ["build", "warmstart-data", "--annotations", str(drawn_world["train_annotations"]), "--out", str(table)]
    assert main([*command, "--image-root", str(drawn_world["train_images"]), "--attribute-pairs-per-image", "1"]) == 0
    attribute = json.loads((tmp_path / "train.manifest.json").read_text())["counts"]["attribute_questions"]
    result = run_entry(
        "sft.py",
        "recipes/miniature/tiny_sft_warmstart.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        table,
        "--image_root",
        drawn_world["train_images"],
        "--output_dir",
        tmp_path / "sft",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--freeze_vision_tower",
        "true",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert attribute > 0 and "freeze_vision_tower: " in result.stderr and f"examples from {table}" in result.stderr
    before, after = load_file(tiny_qwen3vl / "model.safetensors"), load_file(tmp_path / "sft" / "model.safetensors")
    vision = [name for name in before if name.startswith("model.visual.")]
    assert vision and all(torch.equal(before[name], after[name]) for name in vision)
    assert any(not torch.equal(before[name], after[name]) for name in before if "language_model" in name)


def test_tiny_model_pretrain_vision_trains_the_tower_only(
    drawn_world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`veritune tiny-model --pretrain-vision`: 20 steps change the vision tower, leave the language model's
    weights byte-identical, record the stats, and the model still loads and generates."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from miniature.tiny.models import build_tiny_model
    from veritune.cli import main

    plain = build_tiny_model("qwen3vl", tmp_path / "plain", patch_size=8)
    train, dev = drawn_world["train_annotations"].parent, drawn_world["val_annotations"].parent
    out = tmp_path / "pretrained"
    flags = ["--patch-size", "8", "--pretrain-vision", str(train), "--pretrain-vision-eval", str(dev)]
    assert main(["tiny-model", "--out", str(out), *flags, "--pretrain-vision-steps", "20"]) == 0
    assert "vision tower pretrained for 20 steps" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "pretrained"]  # no temporary folder left
    before, after = load_file(plain / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    vision = [name for name in before if name.startswith("model.visual.")]
    assert any(not torch.equal(before[name], after[name]) for name in vision)
    assert all(torch.equal(before[name], after[name]) for name in before if name not in vision)
    identity = json.loads((out / "veritune_tiny.json").read_text())
    stats = identity.pop("vision_pretraining")
    assert identity == json.loads((plain / "veritune_tiny.json").read_text())
    assert stats["steps"] == 20 and stats["seconds"] > 0 and stats["eval"] == str(dev)
    heads = {"class", "attribute_0", "attribute_1", "attribute_2"}
    assert set(stats["eval_accuracy_before"]) == set(stats["eval_accuracy_after"]) == heads
    # each slot's values come from the scene graphs' phrases, the class's hue left out of the shade
    assert [stats["heads"][f"attribute_{slot}"] for slot in range(3)] == [
        ["dark", "light"],
        ["black", "white"],
        ["plain", "striped"],
    ]
    model = AutoModelForImageTextToText.from_pretrained(out)
    processor = AutoProcessor.from_pretrained(out)
    content = [{"type": "image"}, {"type": "text", "text": QUESTION.format(x="cup with a white border")}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    with Image.open(next((train / "images").iterdir())) as image:
        inputs = processor(text=[text], images=[image.convert("RGB")], return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert output.shape[1] == inputs["input_ids"].shape[1] + 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--pretrain-vision", "{empty}"],
            "error: {empty}: not a split folder of `veritune build synthetic-world` "
            "(missing instances.json, scene_graphs.json;",
        ),
        (
            ["--pretrain-vision-steps", "5"],
            "error: --pretrain-vision-steps and --pretrain-vision-eval: only with --pretrain-vision",
        ),
        (["--pretrain-vision", "{empty}", "--warm-start"], "error: --pretrain-vision: not with --warm-start"),
    ],
)
def test_tiny_model_pretrain_vision_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    from veritune.cli import main

    empty = tmp_path / "split"
    empty.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny-model", "--out", str(tmp_path / "m"), *(a.format(empty=empty) for a in extra)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(message.format(empty=empty))
    assert not (tmp_path / "m").exists()


def test_the_attribute_recipe_is_the_base_that_sees() -> None:
    # recipes/miniature/tiny_sft_attributes.yaml: the base chosen on dev (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base)
    # through the committed options
    from trl import SFTConfig

    from finetune.recipe import parse_recipe

    types = (SFTScriptArguments, SFTConfig, VerituneModelConfig)
    script_args, args, model_args = parse_recipe(["recipes/miniature/tiny_sft_attributes.yaml"], types)
    assert model_args.freeze_vision_tower and not model_args.use_peft
    # its table: 3 attribute pairs per image and slot (tests/test_warmstart_data.py checks the comment's command)
    assert Path(script_args.dataset_path).parts[-3:] == ("seeing", "warmstart-data", "train.jsonl")
    assert args.max_steps == 6000 and args.learning_rate == 3e-4 and args.per_device_train_batch_size == 32
