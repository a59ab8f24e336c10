"""Training data through Hugging Face ``datasets``: GRPO, DPO and SFT read JSON, JSON lines, parquet,
``save_to_disk`` folders and (offline, from the datasets cache) Hub datasets, with images as paths under
``image_root`` or embedded ``Image`` features; the record checks and their one-line errors are the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pytest
from conftest import write_oric_fixture
from datasets import Dataset, DatasetDict, Features, Value
from datasets import Image as ImageFeature
from helpers import run_entry
from hub_datasets import cache_hub_dataset

from core.errors import UserError
from finetune.oric_data import get_oric_dataset

ORIC_FEATURES = {"id": Value("int64"), "problem": Value("string"), "solution": Value("string")}


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty datasets cache, offline (as HF_HUB_OFFLINE=1 and HF_DATASETS_CACHE would set it)."""
    cache = tmp_path / "hf-datasets"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return cache


def embedded(records: list[dict[str, Any]], images: Path) -> Dataset:
    rows = [{**r, "image": {"bytes": (images / r["image"]).read_bytes(), "path": r["image"]}} for r in records]
    features = Features({**ORIC_FEATURES, "target_object": Value("string"), "image": ImageFeature()})
    return Dataset.from_list(rows, features=features)


def write_source(kind: str, records: list[dict[str, Any]], images: Path, root: Path, cache: Path) -> dict[str, str]:
    """Write ``records`` as ``kind``; the recipe keys that name it."""
    if kind == "json":
        (root / "d.json").write_text(json.dumps(records))
        return {"dataset_path": str(root / "d.json")}
    if kind == "jsonl":
        (root / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return {"dataset_path": str(root / "d.jsonl")}
    if kind == "parquet":
        Dataset.from_list(records).to_parquet(root / "d.parquet")
        return {"dataset_path": str(root / "d.parquet")}
    if kind == "parquet, embedded images":
        embedded(records, images).to_parquet(root / "d.parquet")
        return {"dataset_path": str(root / "d.parquet")}
    if kind == "save_to_disk":
        Dataset.from_list(records).save_to_disk(root / "saved")
        return {"dataset_path": str(root / "saved")}
    if kind == "save_to_disk DatasetDict, embedded images":
        DatasetDict({"train": embedded(records, images)}).save_to_disk(root / "saved")
        return {"dataset_path": str(root / "saved")}
    if kind == "hub":
        (root / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        cache_hub_dataset("someorg/oric-train", "v1", {"train": root / "d.jsonl"}, cache)
        return {"dataset_name": "someorg/oric-train", "dataset_config": "v1"}
    if kind == "hub, embedded images":
        embedded(records, images).to_parquet(root / "d.parquet")
        cache_hub_dataset("someorg/oric-img", "default", {"train": root / "d.parquet"}, cache)
        return {"dataset_name": "someorg/oric-img", "dataset_config": "default"}
    raise AssertionError(kind)


KINDS = [
    "json",
    "jsonl",
    "parquet",
    "parquet, embedded images",
    "save_to_disk",
    "save_to_disk DatasetDict, embedded images",
    "hub",
    "hub, embedded images",
]


@pytest.mark.parametrize("kind", KINDS)
def test_grpo_reads_every_source(kind: str, tmp_path: Path, hub_cache: Path) -> None:
    path, images = write_oric_fixture(tmp_path / "oric")
    records = json.loads(path.read_text())
    keys = write_source(kind, records, images, tmp_path, hub_cache)
    image_root = None if "embedded" in kind else images
    dataset, report = get_oric_dataset(
        keys.get("dataset_path"),
        image_root,
        dataset_name=keys.get("dataset_name"),
        dataset_config=keys.get("dataset_config"),
    )
    assert report.kept == 8
    assert [row["id"] for row in dataset] == [str(r["id"]) for r in records]
    assert [row["solution"] for row in dataset] == ["yes", "no"] * 4
    first = dataset[0]
    assert first["image"].size == (96, 80)  # the image itself, from its path or its embedded bytes
    if "embedded" in kind:
        assert not first["image_path"].startswith(str(images))


@pytest.mark.parametrize(
    ("kind", "mutate", "message"),
    [
        ("jsonl", lambda r: r[2].pop("target_object"), r"d\.jsonl, line 3 \(id 3\): missing field 'target_object'"),
        ("parquet", lambda r: r[1].update(solution="maybe"), r"d\.parquet: row 1 \(id 2\): solution 'maybe'"),
        ("hub", lambda r: r[0].update(solution="maybe"), r"someorg/oric-train \(v1\) \[train\]: row 0 \(id 1\)"),
    ],
)
def test_record_checks_name_the_source_and_row(
    kind: str, mutate: Callable[[list[dict[str, Any]]], Any], message: str, tmp_path: Path, hub_cache: Path
) -> None:
    path, images = write_oric_fixture(tmp_path / "oric")
    records = json.loads(path.read_text())
    mutate(records)
    keys = write_source(kind, records, images, tmp_path, hub_cache)
    with pytest.raises(UserError, match=message):
        get_oric_dataset(
            keys.get("dataset_path"),
            images,
            dataset_name=keys.get("dataset_name"),
            dataset_config=keys.get("dataset_config"),
        )


@pytest.mark.parametrize(
    ("name", "config", "split", "message"),
    [
        ("someorg/absent", None, "train", r"dataset_name: someorg/absent, split train: .*HF_HUB_OFFLINE is set"),
        ("someorg/oric-train", "v1", "nope", r"dataset_name: someorg/oric-train \(v1\), split nope: .*split"),
    ],
)
def test_hub_errors_are_one_line(
    name: str, config: str | None, split: str, message: str, tmp_path: Path, hub_cache: Path
) -> None:
    path, images = write_oric_fixture(tmp_path / "oric")
    write_source("hub", json.loads(path.read_text()), images, tmp_path, hub_cache)
    with pytest.raises(UserError, match=message) as info:
        get_oric_dataset(None, images, dataset_name=name, dataset_config=config, split=split)
    assert "\n" not in str(info.value)


def test_dpo_reads_a_hub_dataset_with_embedded_images_and_its_test_split(tmp_path: Path, hub_cache: Path) -> None:
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig
    from finetune.dpo_data import get_preference_datasets

    _, images = write_oric_fixture(tmp_path / "oric", num_items=4)
    files = sorted(images.iterdir())

    def rows(offset: int) -> list[dict[str, Any]]:
        return [
            {
                "images": [{"bytes": file.read_bytes(), "path": file.name}],
                "prompt": [{"role": "user", "content": f"Describe image {offset + i}."}],
                "chosen": [{"role": "assistant", "content": "A square."}],
                "rejected": [{"role": "assistant", "content": "A dog."}],
            }
            for i, file in enumerate(files)
        ]

    for split, offset in (("train", 0), ("test", 100)):
        Dataset.from_list(rows(offset)).cast_column("images", datasets.List(ImageFeature())).to_parquet(
            tmp_path / f"{split}.parquet"
        )
    cache_hub_dataset("someorg/prefs", "default", {s: tmp_path / f"{s}.parquet" for s in ("train", "test")}, hub_cache)
    script_args = DPOScriptArguments(dataset_name="someorg/prefs", dataset_config="default")
    training_args = VerituneDPOConfig(output_dir=str(tmp_path / "run"), eval_strategy="steps", use_cpu=True, bf16=False)
    train, evaluation, report = get_preference_datasets(script_args, training_args)
    assert report["train"]["rows"] == 4 and report["eval"]["rows"] == 4
    assert train[0]["images"][0].size == (96, 80)
    texts = {row["prompt"][0]["content"][-1]["text"] for row in evaluation}
    assert texts == {f"Describe image {100 + i}." for i in range(4)}


@pytest.mark.parametrize("kind", ["jsonl", "save_to_disk, embedded images"])
def test_sft_reads_prompt_completion_tables(kind: str, tmp_path: Path) -> None:
    from finetune.sft import SFTScriptArguments, table_examples

    _, images = write_oric_fixture(tmp_path / "oric", num_items=3)
    files = sorted(images.iterdir())
    rows = [
        {
            "prompt": [{"role": "user", "content": "Is there a square in the image?"}],
            "completion": [{"role": "assistant", "content": "yes"}],
            "images": [file.name],
        }
        for file in files
    ]
    if kind == "jsonl":
        (tmp_path / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        args = SFTScriptArguments(dataset_path=str(tmp_path / "sft.jsonl"), image_root=str(images))
    else:
        for row, file in zip(rows, files, strict=True):
            row["images"] = [{"bytes": file.read_bytes(), "path": file.name}]
        Dataset.from_list(rows).cast_column("images", datasets.List(ImageFeature())).save_to_disk(tmp_path / "sft")
        args = SFTScriptArguments(dataset_path=str(tmp_path / "sft"))
    examples = table_examples(args)
    assert len(examples) == 3 and all(Path(e["images"][0]).is_file() for e in examples)
    assert examples[0]["completion"] == [{"role": "assistant", "content": "yes"}]
    bad = [
        {"prompt": r["prompt"], "images": [f.name]} | ({} if i == 1 else {"completion": r["completion"]})
        for i, (r, f) in enumerate(zip(rows, files, strict=True))
    ]
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad))
    with pytest.raises(UserError, match=r"bad\.jsonl, line 2: missing key 'completion'"):
        table_examples(SFTScriptArguments(dataset_path=str(tmp_path / "bad.jsonl"), image_root=str(images)))


def test_grpo_entry_point_trains_on_a_hub_dataset_offline(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """`finetune/grpo.py --dataset_name ... --dataset_config ...` as TRL and open-r1 recipes write it, with
    HF_HUB_OFFLINE=1 and the datasets cache a first load left."""
    path, images = write_oric_fixture(tmp_path / "oric")
    cache = tmp_path / "hf-datasets"
    write_source("hub, embedded images", json.loads(path.read_text()), images, tmp_path, cache)
    result = run_entry(
        "grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        *("--model_name_or_path", tiny_qwen3vl, "--dataset_path", "", "--image_root", ""),
        *("--dataset_name", "someorg/oric-img", "--dataset_config", "default", "--dataset_train_split", "train"),
        *("--output_dir", tmp_path / "run", "--max_steps", "1", "--save_strategy", "no", "--report_to", "none"),
        HF_DATASETS_CACHE=str(cache),
        HF_HUB_OFFLINE="1",
        VERITUNE_CACHE=str(tmp_path / "veritune-cache"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "someorg/oric-img (default) [train]" in result.stderr
    assert (tmp_path / "veritune-cache" / "dataset-images" / "someorg--oric-img").is_dir()
