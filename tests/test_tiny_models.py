"""Tiny offline VLMs load like hub models and render chats as the real templates do."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from core.errors import UserError
from miniature.tiny.models import QWEN_SPECIAL_TOKENS, build_tiny_model


@pytest.mark.parametrize("fixture", ["tiny_qwen3vl", "tiny_qwen25vl"])
def test_tiny_model_loads_with_auto_classes(fixture: str, request: pytest.FixtureRequest) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path: Path = request.getfixturevalue(fixture)
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    assert processor.video_processor is not None and processor.image_processor is not None
    for token in QWEN_SPECIAL_TOKENS:
        assert processor.tokenizer.convert_tokens_to_ids(token) != processor.tokenizer.unk_token_id
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is there a cat?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Is there a cat?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    inputs = processor(text=[text], images=[Image.new("RGB", (120, 90), "red")], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape


def test_system_turn_and_multi_image_rendering(tiny_qwen3vl: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Same?"}]},
        {"role": "assistant", "content": "No."},
    ]
    text = processor.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>Same?<|im_end|>\n"
        "<|im_start|>assistant\nNo.<|im_end|>\n"
    )


def test_tiny_model_answers_in_r1_format(tiny_qwen3vl: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from core.prompts import with_r1_instruction
    from rewards import format_reward

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl)
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    content = [{"type": "image"}, {"type": "text", "text": with_r1_instruction("Is there a dog in the image?")}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=[text], images=[Image.new("RGB", (64, 64), "blue")], return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=32, do_sample=False)
    answer = processor.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)[0]
    assert format_reward([answer]) == [1.0], answer


def test_tiny_model_is_deterministic(tmp_path: Path) -> None:
    first = build_tiny_model("qwen3vl", tmp_path / "a", seed=3, format_warmup_steps=2)
    second = build_tiny_model("qwen3vl", tmp_path / "b", seed=3, format_warmup_steps=2)
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()


def test_unknown_family() -> None:
    with pytest.raises(UserError, match="unknown tiny model family 'gpt'"):
        build_tiny_model("gpt", "unused")


def test_demo_size_is_wider_and_sizes_are_checked(tmp_path: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        build_tiny_model("qwen3vl", tmp_path / "demo", format_warmup_steps=0, size="demo")
    )
    assert (config.text_config.hidden_size, config.vision_config.hidden_size) == (128, 64)
    assert config.vision_config.out_hidden_size == config.text_config.hidden_size
    with pytest.raises(UserError, match="unknown tiny model size 'huge'"):
        build_tiny_model("qwen3vl", tmp_path / "x", size="huge")
    with pytest.raises(UserError, match="unknown tiny model size 'demo'"):
        build_tiny_model("qwen25vl", tmp_path / "y", size="demo")


def test_tiny_clip_command_builds_a_clip_that_loads_as_the_real_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import CLIPModel, CLIPProcessor

    from veritune.cli import main

    assert main(["tiny-clip", "--out", str(tmp_path / "clip")]) == 0
    assert "random weights" in capsys.readouterr().out
    assert isinstance(CLIPModel.from_pretrained(tmp_path / "clip"), CLIPModel)
    CLIPProcessor.from_pretrained(tmp_path / "clip")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["tiny-clip", "--out", str(tmp_path / "c2"), "--annotations", str(tmp_path / "a.json")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --annotations and --image-root: give both (to train) or neither (random weights)"
    )


@pytest.mark.slow
def test_tiny_model_warm_start_is_the_demos_base_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tiny-model --warm-start`: the demo's world, demo-size model and SFT warm-start (here 1 step), then
    reused from the cache (about 40 s)."""
    import subprocess
    import sys

    from helpers import entry_env

    env = entry_env(VERITUNE_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "veritune.cli", "tiny-model", "--warm-start", "--warm-start-steps", "1"]
    first = subprocess.run([*command, "--out", str(tmp_path / "a")], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run([*command, "--out", str(tmp_path / "b")], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "reusing the cached warm-start" in second.stdout, second.stdout[-2000:]
    for out in ("a", "b"):
        assert (tmp_path / out / "model.safetensors").read_bytes() == (
            tmp_path / "a" / "model.safetensors"
        ).read_bytes()


@pytest.mark.parametrize(
    ("patch_size", "grid", "tokens"),
    [(None, [1, 4, 4], 4), (16, [1, 4, 4], 4), (8, [1, 8, 8], 16)],  # None: the family's 16-px patches
)
def test_patch_size_sets_the_vision_tokens_per_64px_image(
    tmp_path: Path, patch_size: int | None, grid: list[int], tokens: int
) -> None:
    """Processor and model agree on the patch (and merge, temporal patch): a 64-px image is ``grid`` patches
    and ``tokens`` image tokens in the prompt, as many as the vision tower hands the language model."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = build_tiny_model("qwen3vl", tmp_path / "m", format_warmup_steps=0, patch_size=patch_size)
    model = AutoModelForImageTextToText.from_pretrained(path)
    processor = AutoProcessor.from_pretrained(path)
    vision, images = model.config.vision_config, processor.image_processor
    assert (images.patch_size, images.merge_size, images.temporal_patch_size) == (
        vision.patch_size,
        vision.spatial_merge_size,
        vision.temporal_patch_size,
    )
    content = [{"type": "image"}, {"type": "text", "text": "Is there a cup in the image?"}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=[text], images=[Image.new("RGB", (64, 64), "red")], return_tensors="pt")
    assert inputs["image_grid_thw"].tolist() == [grid]
    assert int((inputs["input_ids"] == model.config.image_token_id).sum()) == tokens
    output = model.generate(
        **inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False
    )  # the forward checks features == tokens
    assert output.shape[1] == inputs["input_ids"].shape[1] + 3
    identity = (path / "veritune_tiny.json").read_text()
    assert ("patch_size" in identity) == (patch_size == 8)  # a default model's identity file is unchanged


def test_odd_patch_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--patch-size: expected an even number"):
        build_tiny_model("qwen3vl", tmp_path / "m", patch_size=7)
