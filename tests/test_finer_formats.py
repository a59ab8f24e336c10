"""Readers for published preference data: a veritune dataset directory, the FINER-Tuning release (sharegpt
JSONL) and RLAIF-V (JSON lines and parquet with embedded image bytes), into TRL's conversational format."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from test_finer_builder import GRAPH
from trl.data_utils import prepare_multimodal_messages

from core.errors import UserError
from data_builders.finer.build import build_finer_from_scene_graphs
from finetune.preference_data import PreferenceReport, iter_preference_rows, load_preference_dataset, with_images

COLUMNS = {"images", "prompt", "chosen", "rejected", "subset", "polarity"}


def finer_record(image: str, chosen: str = "No, but I can see a dog.", rejected: str = "Yes, I can see a cat.") -> dict:
    """One row of the FINER-Tuning release (LLaMA-Factory sharegpt DPO layout)."""
    return {
        "conversations": [{"from": "human", "value": "<image>\nCan you see a cat in this image?"}],
        "chosen": {"from": "gpt", "value": chosen},
        "rejected": {"from": "gpt", "value": rejected},
        "images": [image],
        "meta": {"shard": "train-00000", "row_idx": 3, "qa_type": "obj", "polarity": "neg"},
    }


def rlaif_record(image: object, idx: str = "0") -> dict:
    return {
        "ds_name": "RLAIF-V",
        "image": image,
        "question": "Describe the image.",
        "chosen": "A red square.",
        "rejected": "A blue circle.",
        "origin_dataset": "COCO",
        "origin_split": "{}",
        "idx": idx,
        "image_path": None,
    }


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture()
def image_dir(tmp_path: Path) -> Path:
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", "b.jpg"):
        Image.new("RGB", (40, 30), (200, 30, 30)).save(images / name)
    return images


def test_veritune_directory_loads_with_images_first_in_the_user_turn(image_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "g.json").write_text(
        json.dumps(
            [{**copy.deepcopy(GRAPH), "image": "a.jpg"}, {**copy.deepcopy(GRAPH), "image": "b.jpg", "example_id": "2"}]
        )
    )
    build_finer_from_scene_graphs(tmp_path / "g.json", image_dir, tmp_path / "data", seed=0)
    train = load_preference_dataset(tmp_path / "data")
    validation = load_preference_dataset(tmp_path / "data", split="validation")
    assert set(train.column_names) == COLUMNS and (len(train), len(validation)) == (15, 1)
    row = train[0]
    assert row["images"][0] in {str(image_dir.resolve() / "a.jpg"), str(image_dir.resolve() / "b.jpg")}
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"][0]["type"] == "image"
    assert row["chosen"][0]["role"] == "assistant" and row["subset"] in {"obj", "attr", "rel", "wh"}


def test_finer_release_rows_become_conversational(image_dir: Path) -> None:
    path = write_jsonl(
        image_dir.parent / "first6_pon.jsonl", [finer_record("images/a.jpg"), finer_record(str(image_dir / "b.jpg"))]
    )
    dataset = load_preference_dataset(path)
    assert len(dataset) == 2
    row = dataset[0]
    assert row["images"] == [str(image_dir / "a.jpg")]  # relative to the file's folder by default
    assert dataset[1]["images"] == [str(image_dir / "b.jpg")]  # absolute paths stay as they are
    assert row["prompt"] == [
        {
            "role": "user",
            "content": [{"type": "image", "text": None}, {"type": "text", "text": "Can you see a cat in this image?"}],
        }
    ]
    assert row["chosen"] == [{"role": "assistant", "content": [{"type": "text", "text": "No, but I can see a dog."}]}]
    assert (row["subset"], row["polarity"]) == ("obj", "neg")


def test_image_root_overrides_the_default(image_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write_jsonl(elsewhere / "x.jsonl", [finer_record("a.jpg")])
    assert load_preference_dataset(path, image_root=image_dir)[0]["images"] == [str(image_dir / "a.jpg")]


def test_prompt_fits_trls_multimodal_message_preparation(image_dir: Path) -> None:
    path = write_jsonl(image_dir.parent / "f.jsonl", [finer_record("images/a.jpg")])
    row = with_images(load_preference_dataset(path), max_pixels=600)[0]
    messages = prepare_multimodal_messages(row["prompt"], images=row["images"])
    image = messages[0]["content"][0]["image"]
    assert isinstance(image, Image.Image) and image.width * image.height <= 600
    assert messages[0]["content"][1] == {"type": "text", "text": "Can you see a cat in this image?"}


def test_rows_with_equal_answers_are_dropped_and_counted(image_dir: Path) -> None:
    path = write_jsonl(
        image_dir.parent / "f.jsonl",
        [finer_record("images/a.jpg"), finer_record("images/b.jpg", chosen="Same.", rejected="Same.")],
    )
    report = PreferenceReport()
    dataset = load_preference_dataset(path, report=report)
    assert (
        len(dataset) == 1 and report.dropped == {"chosen_equals_rejected": 1} and (report.total, report.kept) == (2, 1)
    )


def test_rows_with_missing_images_are_listed_skipped_and_counted(image_dir: Path) -> None:
    path = write_jsonl(image_dir.parent / "f.jsonl", [finer_record("images/a.jpg"), finer_record("images/gone.jpg")])
    report = PreferenceReport()
    assert len(load_preference_dataset(path, report=report)) == 1
    assert report.dropped == {"missing_image": 1} and report.missing_images == [str(image_dir / "gone.jpg")]


def test_rlaif_v_json_lines_with_image_paths(image_dir: Path) -> None:
    path = write_jsonl(
        image_dir.parent / "rlaif.jsonl",
        [rlaif_record("images/a.jpg"), rlaif_record({"path": "images/b.jpg", "bytes": None})],
    )
    dataset = load_preference_dataset(path)
    assert dataset["images"] == [[str(image_dir / "a.jpg")], [str(image_dir / "b.jpg")]]
    assert dataset[0]["rejected"][0]["content"][0]["text"] == "A blue circle." and dataset[0]["subset"] == "COCO"


def test_rlaif_v_parquet_with_embedded_bytes_is_extracted_once(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    Image.new("RGB", (12, 10), (0, 255, 0)).save(buffer, format="PNG")
    records = [rlaif_record({"bytes": buffer.getvalue(), "path": "coco/0001.png"}, idx=str(i)) for i in range(2)]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "RLAIF-V-Dataset_000.parquet")
    dataset = load_preference_dataset(tmp_path / "RLAIF-V-Dataset_000.parquet")
    extracted = Path(dataset[0]["images"][0])
    assert extracted.parent == tmp_path / "RLAIF-V-Dataset_000-images" and extracted.suffix == ".png"
    assert dataset[1]["images"] == dataset[0]["images"]  # same bytes, same file
    assert Image.open(extracted).size == (12, 10)
    assert len(load_preference_dataset(tmp_path)) == 2  # a directory of parquet shards


def test_iter_preference_rows_yields_the_trl_columns(image_dir: Path) -> None:
    path = write_jsonl(image_dir.parent / "f.jsonl", [finer_record("images/a.jpg")])
    report = PreferenceReport()
    rows = list(iter_preference_rows(path, report=report))
    assert set(rows[0]) == COLUMNS and report.kept == 1


def test_unknown_format_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [{"foo": 1}])
    with pytest.raises(UserError, match=r"bad.jsonl, line 1: unknown preference format"):
        load_preference_dataset(path)


def test_malformed_record_is_an_error_naming_the_line(image_dir: Path) -> None:
    record = finer_record("images/a.jpg")
    record["conversations"] = [{"from": "robot", "value": "hi"}]
    path = write_jsonl(image_dir.parent / "f.jsonl", [finer_record("images/a.jpg"), record])
    with pytest.raises(UserError, match=r"f.jsonl, line 2: malformed finer record .*unknown speaker 'robot'"):
        load_preference_dataset(path)


def test_no_usable_row_is_an_error_with_the_summary(image_dir: Path) -> None:
    path = write_jsonl(image_dir.parent / "f.jsonl", [finer_record("images/gone.jpg")])
    with pytest.raises(
        UserError, match=r"no usable preference rows \(0/1 preference rows kept; dropped: \{'missing_image': 1\}\)"
    ):
        load_preference_dataset(path)


def test_explicit_format_must_be_known(image_dir: Path) -> None:
    with pytest.raises(UserError, match="unknown preference format 'sharegpt'; choose auto, veritune, finer, rlaif-v"):
        load_preference_dataset(image_dir, fmt="sharegpt")


@pytest.mark.parametrize("fmt", ["parquet", "disk"])
def test_build_finer_also_save_copy_reads_as_the_build_does(tmp_path: Path, fmt: str) -> None:
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig
    from finetune.dpo_data import get_preference_datasets
    from veritune.cli import main

    images = tmp_path / "images"
    images.mkdir()
    for index in range(8):
        Image.new("RGB", (48, 48), (index * 30, 60, 90)).save(images / f"{index}.jpg")
    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([{**GRAPH, "image": f"{i}.jpg"} for i in range(8)]))
    out = tmp_path / "finer"
    args = ["build", "finer", "--scene-graphs", str(graphs), "--image-root", str(images), "--out", str(out)]
    assert main([*args, "--also-save", fmt]) == 0
    assert "veritune build finer" in (tmp_path / "finer-hf" / "README.md").read_text()
    training_args = VerituneDPOConfig(output_dir=str(tmp_path / "run"), eval_strategy="steps", use_cpu=True, bf16=False)
    _, _, built = get_preference_datasets(DPOScriptArguments(dataset_path=str(out)), training_args)
    train, evaluation, copied = get_preference_datasets(
        DPOScriptArguments(dataset_path=str(tmp_path / "finer-hf")), training_args
    )
    assert copied["train"]["rows"] == built["train"]["rows"] and copied["eval"]["rows"] == built["eval"]["rows"]
    assert "held_out_of_train" not in copied["eval"]  # the copy's own validation split
    assert train[0]["images"][0].size == (48, 48)
