"""``vision_feature_cache``: a frozen vision tower's features computed once per image, the same features (bit for
bit on this CPU) and the same trained weights as without the cache, in SFT and in full-parameter DPO."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import run_entry, write_finer_fixture
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, AutoProcessor

from core.errors import UserError
from finetune.configs import VerituneModelConfig
from finetune.models import freeze_vision_tower
from finetune.vision_cache import cache_vision_features


def images(count: int, offset: int = 0) -> list[Image.Image]:
    """Distinct 64-px images (colour blocks at different places)."""
    out = []
    for index in range(offset, offset + count):
        image = Image.new("RGB", (64, 64), (20 * index % 256, 90, 160))
        image.paste((250, 250 - 15 * index % 256, 10), (index % 40, index % 30, index % 40 + 20, index % 30 + 20))
        out.append(image)
    return out


@pytest.fixture(scope="module")
def tower_model(tiny_qwen3vl: Path) -> tuple[torch.nn.Module, object]:
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype=torch.float32)
    freeze_vision_tower(model)
    return model, AutoProcessor.from_pretrained(tiny_qwen3vl).image_processor


def features(model: torch.nn.Module, processor: object, batch: list[Image.Image]) -> object:
    inputs = processor(images=batch, return_tensors="pt")
    return model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])


def assert_same(a: object, b: object) -> None:
    assert torch.equal(torch.cat(a.pooler_output), torch.cat(b.pooler_output))
    assert len(a.deepstack_features) == len(b.deepstack_features) > 0
    for left, right in zip(a.deepstack_features, b.deepstack_features, strict=True):
        assert torch.equal(torch.cat(left), torch.cat(right))
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)


def test_cached_features_are_the_towers_own(tower_model: tuple[torch.nn.Module, object]) -> None:
    model, processor = tower_model
    first, mixed = images(6), images(4, offset=3)[::-1] + images(1)  # 3 seen + 1 new, reversed, one repeat
    expected_first, expected_mixed = features(model, processor, first), features(model, processor, mixed)
    cache = cache_vision_features(model)
    try:
        assert_same(features(model, processor, first), expected_first)  # six misses
        assert (cache.hits, cache.misses) == (0, 6)
        assert_same(features(model, processor, first), expected_first)  # six hits
        assert_same(features(model, processor, mixed), expected_mixed)
        assert (cache.hits, cache.misses) == (6 + 4, 6 + 1) and len(cache.entries) == 7
        duplicates = images(1, offset=20) * 3  # one new image three times in a batch: computed once
        expected = features_uncached(model, processor, duplicates)
        assert_same(features(model, processor, duplicates), expected)
        assert (cache.hits, cache.misses) == (10 + 2, 7 + 1)
    finally:
        del model.model.visual.forward  # the module's own forward again, for the other tests


def features_uncached(model: torch.nn.Module, processor: object, batch: list[Image.Image]) -> object:
    cache = model.model.visual.forward
    del model.model.visual.forward
    try:
        return features(model, processor, batch)
    finally:
        model.model.visual.forward = cache


def test_the_cache_keeps_the_most_recent_images(tower_model: tuple[torch.nn.Module, object]) -> None:
    model, processor = tower_model
    cache = cache_vision_features(model, max_images=2)
    try:
        for image in images(3):
            features(model, processor, [image])
        assert len(cache.entries) == 2 and cache.misses == 3
        features(model, processor, images(1))  # the oldest was dropped: computed again
        assert cache.misses == 4
    finally:
        del model.model.visual.forward


def test_the_key_is_the_pixels_and_the_grid_in_any_dtype() -> None:
    from finetune.vision_cache import VisionFeatureCache

    pixels = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    key = VisionFeatureCache._key(pixels, [1, 1, 3])
    assert key == VisionFeatureCache._key(pixels.clone(), [1, 1, 3])
    assert key != VisionFeatureCache._key(pixels, [1, 3, 1]) != VisionFeatureCache._key(pixels + 1, [1, 1, 3])
    half = VisionFeatureCache._key(pixels.to(torch.bfloat16), [1, 1, 3])  # what a bf16 tower receives
    assert half != key and half == VisionFeatureCache._key(pixels.to(torch.bfloat16), [1, 1, 3])


def test_a_tower_that_trains_is_refused(tiny_qwen3vl: Path) -> None:
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl)
    with pytest.raises(UserError, match="vision_feature_cache: needs freeze_vision_tower: true"):
        cache_vision_features(model)
    with pytest.raises(UserError, match="vision_feature_cache: Sequential has no Qwen-VL vision tower"):
        cache_vision_features(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(UserError, match="vision_feature_cache: needs freeze_vision_tower: true"):
        VerituneModelConfig(vision_feature_cache=True)
    assert VerituneModelConfig(vision_feature_cache=True, freeze_vision_tower=True).vision_feature_cache


def trained_weights(script: str, recipe: str, flags: list[str | Path], out: Path, cache: bool) -> dict:
    flags = [*flags, "--output_dir", out, "--freeze_vision_tower", "true", "--report_to", "none"]
    result = run_entry(script, recipe, *flags, "--vision_feature_cache", str(cache).lower())
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("vision_feature_cache: the frozen vision tower's features" in result.stderr) is cache
    return load_file(out / "model.safetensors")


def test_sft_with_the_cache_trains_the_same_weights(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from miniature.stages import WARMSTART_DATA_FLAGS
    from miniature.world import build_synthetic_world
    from veritune.cli import main

    world = build_synthetic_world(tmp_path / "world", num_train_images=6, num_val_images=2, seed=5)
    table = tmp_path / "warmstart-data" / "train.jsonl"  # the demo warm-start's table (veritune build warmstart-data)
    command = ["build", "warmstart-data", "--annotations", str(world["train_annotations"]), "--out", str(table)]
    assert main([*command, "--image-root", str(world["train_images"]), *WARMSTART_DATA_FLAGS]) == 0
    flags: list[str | Path] = ["--model_name_or_path", tiny_qwen3vl, "--dataset_path", table]
    flags += ["--image_root", world["train_images"], "--max_steps", "3", "--per_device_train_batch_size", "8"]
    flags += ["--dataloader_num_workers", "0", "--dataloader_persistent_workers", "false"]
    recipe = "recipes/miniature/tiny_sft_warmstart.yaml"
    plain = trained_weights("sft.py", recipe, flags, tmp_path / "plain", cache=False)
    cached = trained_weights("sft.py", recipe, flags, tmp_path / "cached", cache=True)
    assert plain.keys() == cached.keys()
    assert all(torch.equal(plain[name], cached[name]) for name in plain)
    before = load_file(tiny_qwen3vl / "model.safetensors")
    assert any(not torch.equal(before[name], cached[name]) for name in before if "language_model" in name)


def test_full_parameter_dpo_with_the_cache_trains_the_same_weights(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """The policy's tower and the reference copy's are both cached; the trained weights do not move."""
    data = write_finer_fixture(tmp_path / "finer", num_images=4)
    flags: list[str | Path] = ["--model_name_or_path", tiny_qwen3vl, "--dataset_path", data]
    flags += ["--max_steps", "2", "--save_strategy", "no", "--use_peft", "false", "--learning_rate", "1e-3"]
    recipe = "recipes/miniature/tiny_finer_demo.yaml"
    plain = trained_weights("dpo.py", recipe, flags, tmp_path / "plain", cache=False)
    cached = trained_weights("dpo.py", recipe, flags, tmp_path / "cached", cache=True)
    assert all(torch.equal(plain[name], cached[name]) for name in plain)
    before = load_file(tiny_qwen3vl / "model.safetensors")
    assert any(not torch.equal(before[name], cached[name]) for name in before if "language_model" in name)


def test_lora_dpo_with_the_cache_trains_the_same_adapter(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """With LoRA the reference is the policy with its adapter off: one cached tower serves both."""
    data = write_finer_fixture(tmp_path / "finer", num_images=4)
    flags: list[str | Path] = ["--model_name_or_path", tiny_qwen3vl, "--dataset_path", data]
    flags += ["--max_steps", "2", "--save_strategy", "no", "--use_peft", "true", "--learning_rate", "1e-2"]
    adapters = {}
    for cache in (False, True):
        out = tmp_path / f"cache-{cache}"
        args = [*flags, "--output_dir", out, "--freeze_vision_tower", "true", "--report_to", "none"]
        args += ["--vision_feature_cache", str(cache).lower()]
        result = run_entry("dpo.py", "recipes/miniature/tiny_finer_demo.yaml", *args)
        assert result.returncode == 0, result.stderr[-3000:]
        adapters[cache] = load_file(out / "adapter_model.safetensors")
    assert adapters[False].keys() == adapters[True].keys() and adapters[True]
    assert all(torch.equal(adapters[False][name], adapters[True][name]) for name in adapters[False])
