"""Images embedded in a benchmark file (VLMEvalKit TSV base64 cells, NaturalBench parquet bytes) are written
only inside their image folder, whatever a row's index says, and under names keyed by their content: an edited
file, or another file of the same stem under one ``--image-root``, never reuses a stale image."""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from core.images import embedded_image_name, extract_embedded_image
from eval_hooks.registry import get_benchmark
from veritune.cli import main

RED, BLUE = (250, 0, 0), (0, 0, 250)
# the columns of each TSV layout besides index and image, and a right answer for them
LAYOUTS = {
    "mcq": ({"question": "Which colour?", "A": "red", "B": "blue", "answer": "A", "category": "colour"}, "A"),
    "yn": ({"question": "Is it red? Please answer yes or no.", "answer": "Yes", "category": "color"}, "Yes"),
    "vqa": ({"question": "Which colour?", "answer": "red", "category": "colour"}, "red"),
}
TSV_BENCHMARKS = {
    "mcq_tsv": "mcq",
    "mmstar": "mcq",
    "vstar": "mcq",
    "tsv_yn": "yn",
    "mme": "yn",
    "tsv_vqa": "vqa",
    "textvqa": "vqa",
    "chartqa": "vqa",
}


def _jpeg(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="JPEG")
    return buffer.getvalue()


def _colour(path: Path) -> tuple[int, int, int]:
    with Image.open(path) as image:
        return image.convert("RGB").getpixel((4, 4))


def _write_tsv(path: Path, layout: str, images: dict[str, tuple[int, int, int]]) -> Path:
    columns, _ = LAYOUTS[layout]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["index", "image", *columns], delimiter="\t")
        writer.writeheader()
        for index, colour in images.items():
            writer.writerow({"index": index, "image": base64.b64encode(_jpeg(colour)).decode(), **columns})
    return path


def _write_naturalbench(folder: Path, images: dict[str, tuple[int, int, int]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "Index": index,
            "Image_0": {"bytes": _jpeg(colour), "path": None},
            "Image_1": {"bytes": _jpeg(tuple(255 - c for c in colour)), "path": None},
            "Question_0": "Is it red?",
            "Question_1": "Is it cyan?",
            "Image_0_Question_0": "Yes",
            "Image_1_Question_0": "No",
            "Image_0_Question_1": "No",
            "Image_1_Question_1": "Yes",
            "Question_Type": "yes_no",
        }
        for index, colour in images.items()
    ]
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "test-00000-of-00001.parquet")
    return folder


def _files(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


def _predictions(path: Path, answers: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "prediction": p}) + "\n" for i, p in answers.items()))
    return path


def _score(name: str, data: Path, image_root: Path, predictions: Path, out: Path) -> None:
    argv = ["eval", "score", "--benchmarks", name, "--data", f"{name}={data}", "--image-root", str(image_root)]
    assert main([*argv, "--predictions", str(predictions), "--out", str(out)]) == 0


@pytest.mark.parametrize("name", sorted(TSV_BENCHMARKS))
def test_a_tsv_index_writes_no_file_outside_the_image_folder(name: str, tmp_path: Path) -> None:
    absolute = tmp_path / "elsewhere" / "x"
    indices = ["../../../x", str(absolute), "ok"]
    data = _write_tsv(tmp_path / "data" / "a" / "b" / f"{name}.tsv", TSV_BENCHMARKS[name], dict.fromkeys(indices, RED))
    image_root, out = tmp_path / "images" / "root", tmp_path / "out"
    image_root.mkdir(parents=True)
    predictions = _predictions(tmp_path / "predictions.jsonl", dict.fromkeys(indices, LAYOUTS[TSV_BENCHMARKS[name]][1]))
    before = _files(tmp_path)
    _score(name, data, image_root, predictions, out)
    written = _files(tmp_path) - before
    assert written and all(image_root in p.parents or out in p.parents for p in written), sorted(map(str, written))
    assert not (tmp_path / "elsewhere").exists()
    items = get_benchmark(name).load(data, image_root)
    assert all(image_root / f"{name}_images" == item.images[0].parent for item in items)
    assert all(_colour(item.images[0])[0] > 200 for item in items)


def test_a_naturalbench_index_writes_no_file_outside_the_image_folder(tmp_path: Path) -> None:
    absolute = tmp_path / "elsewhere" / "x"
    indices = ["../../../x", str(absolute)]
    data = _write_naturalbench(tmp_path / "data" / "naturalbench", dict.fromkeys(indices, RED))
    image_root, out = tmp_path / "images" / "root", tmp_path / "out"
    image_root.mkdir(parents=True)
    cells = ("q0_i0", "q0_i1", "q1_i0", "q1_i1")
    answers = {f"{i}/{cell}": "Yes" if cell in ("q0_i0", "q1_i1") else "No" for i in indices for cell in cells}
    predictions = _predictions(tmp_path / "predictions.jsonl", answers)
    before = _files(tmp_path)
    _score("naturalbench", data, image_root, predictions, out)
    written = _files(tmp_path) - before
    assert written and all(image_root in p.parents or out in p.parents for p in written), sorted(map(str, written))
    assert not (tmp_path / "elsewhere").exists()
    assert all(item.images[0].parent == image_root for item in get_benchmark("naturalbench").load(data, image_root))


@pytest.mark.parametrize("name", ["mmstar", "tsv_yn", "tsv_vqa"])
def test_an_edited_tsv_gets_its_new_images(name: str, tmp_path: Path) -> None:
    data = _write_tsv(tmp_path / "MMStar.tsv", TSV_BENCHMARKS[name], {"0": RED})
    assert _colour(get_benchmark(name).load(data, None)[0].images[0])[0] > 200
    _write_tsv(data, TSV_BENCHMARKS[name], {"0": BLUE})  # the same index, another image
    assert _colour(get_benchmark(name).load(data, None)[0].images[0])[2] > 200


def test_two_tsvs_of_one_stem_under_one_image_root_keep_their_own_images(tmp_path: Path) -> None:
    red = _write_tsv(tmp_path / "a" / "MMStar.tsv", "mcq", {"0": RED})
    blue = _write_tsv(tmp_path / "b" / "MMStar.tsv", "mcq", {"0": BLUE})
    image_root = tmp_path / "images"
    assert _colour(get_benchmark("mmstar").load(red, image_root)[0].images[0])[0] > 200
    assert _colour(get_benchmark("mmstar").load(blue, image_root)[0].images[0])[2] > 200
    assert _colour(get_benchmark("mmstar").load(red, image_root)[0].images[0])[0] > 200


def test_an_edited_naturalbench_file_gets_its_new_images(tmp_path: Path) -> None:
    data = _write_naturalbench(tmp_path / "naturalbench", {"0": RED})
    assert _colour(get_benchmark("naturalbench").load(data)[0].images[0])[0] > 200
    _write_naturalbench(data, {"0": BLUE})
    assert _colour(get_benchmark("naturalbench").load(data)[0].images[0])[2] > 200


@pytest.mark.parametrize("label", ["../../x", "/abs/x", "", "..", "a/b\\c", "x" * 300])
def test_an_embedded_image_name_stays_in_its_folder(label: str, tmp_path: Path) -> None:
    folder = tmp_path / "deep" / "images"
    path = extract_embedded_image(_jpeg(RED), folder, label)
    assert path.parent == folder and _files(tmp_path) == {path} and len(path.name) < 80


def test_a_link_planted_in_the_image_folder_is_replaced_not_followed(tmp_path: Path) -> None:
    data = _write_tsv(tmp_path / "MMStar.tsv", "mcq", {"0": RED})
    folder, outside = tmp_path / "images" / "MMStar_images", tmp_path / "outside"
    folder.mkdir(parents=True)
    outside.mkdir()
    (folder / ".veritune-write-test").symlink_to(outside / "probe")
    (folder / embedded_image_name(_jpeg(RED), "0")).symlink_to(outside / "image.jpg")
    image = get_benchmark("mmstar").load(data, tmp_path / "images")[0].images[0]
    assert image.parent == folder and not image.is_symlink() and _colour(image)[0] > 200
    assert not any(outside.iterdir())
