"""Stale or shared output is never taken for new output: one output policy for every
builder, predictions files that know what made them, and outputs that honour the umask."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench

from data_builders.oric.annotations import ImageRecord
from veritune.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


# ----------------------------------------------------------------------------------------- FINER (directory output)


def finer_inputs(tmp_path: Path) -> dict[str, Path]:
    from PIL import Image
    from test_finer_builder import GRAPH

    images = tmp_path / "images"
    images.mkdir()
    for index in range(4):
        Image.new("RGB", (32, 32), (index * 40, 60, 90)).save(images / f"{index}.jpg")
    with_missing = tmp_path / "graphs-a.json"
    with_missing.write_text(json.dumps([{**GRAPH, "image": f"{i}.jpg"} for i in range(5)]))  # 4.jpg is missing
    complete = tmp_path / "graphs-b.json"
    complete.write_text(json.dumps([{**GRAPH, "image": f"{i}.jpg"} for i in range(4)]))
    return {"images": images, "a": with_missing, "b": complete}


def test_finer_out_holding_another_build_is_refused_and_force_clears_it(tmp_path: Path, capsys) -> None:
    inputs = finer_inputs(tmp_path)
    out = tmp_path / "finer"
    common = ["build", "finer", "--image-root", str(inputs["images"]), "--out", str(out)]
    assert run_cli([*common, "--scene-graphs", str(inputs["a"])], capsys)[0] == 0
    assert (out / "missing_images.txt").read_text() == "4.jpg\n"

    code, _, err = run_cli([*common, "--scene-graphs", str(inputs["b"])], capsys)
    assert code == 2 and "Traceback" not in err
    assert (
        f"error: --out {out}: holds a build with other inputs or settings (scene_graphs differ); "
        "choose another --out, or add --force" in err
    )
    code, _, err = run_cli([*common, "--scene-graphs", str(inputs["a"]), "--seed", "3"], capsys)
    assert code == 2 and "(seed differ)" in err

    assert run_cli([*common, "--scene-graphs", str(inputs["b"]), "--force"], capsys)[0] == 0
    assert not (out / "missing_images.txt").exists(), "the earlier build's file was left beside the new manifest"
    assert json.loads((out / "manifest.json").read_text())["missing_images"] == []

    code, stdout, _ = run_cli([*common, "--scene-graphs", str(inputs["b"])], capsys)  # the same build again
    assert code == 0 and "holds this same build: resuming it" in stdout


def test_finer_out_holding_foreign_files_is_refused(tmp_path: Path, capsys) -> None:
    inputs = finer_inputs(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = run_cli(
        [
            "build",
            "finer",
            "--scene-graphs",
            str(inputs["b"]),
            "--image-root",
            str(inputs["images"]),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2 and "not written by a veritune build" in err and (out / "notes.txt").exists()


def test_finer_bench_out_of_another_build_is_refused(tmp_path: Path, capsys) -> None:
    inputs = finer_inputs(tmp_path)
    out = tmp_path / "bench" / "finer.csv"
    assert run_cli(["build", "finer-bench", "--scene-graphs", str(inputs["b"]), "--out", str(out)], capsys)[0] == 0
    assert json.loads((out.parent / "finer.manifest.json").read_text())["build"]["command"] == "build finer-bench"
    code, _, err = run_cli(
        ["build", "finer-bench", "--scene-graphs", str(inputs["b"]), "--out", str(out), "--max-objects", "2"], capsys
    )
    assert code == 2 and "(max_objects differ)" in err
    assert (
        run_cli(
            [
                "build",
                "finer-bench",
                "--scene-graphs",
                str(inputs["b"]),
                "--out",
                str(out),
                "--max-objects",
                "2",
                "--force",
            ],
            capsys,
        )[0]
        == 0
    )


# ---------------------------------------------------------------------------------------------- ORIC (file output)


class AlwaysYes:
    """A judge that finds every object predictable from its context: no yes-question can be asked."""

    name = "always-yes"

    def __init__(self, images: list[ImageRecord], **options: object) -> None:
        pass

    def __call__(self, queries: list) -> list[str]:
        return ["yes"] * len(queries)

    def describe(self) -> dict[str, str]:
        return {"name": self.name}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from miniature.tiny.clip import build_tiny_clip
    from miniature.world import build_synthetic_world

    root = tmp_path_factory.mktemp("stale-world")
    paths = build_synthetic_world(root / "world", num_train_images=24, num_val_images=24)
    paths["clip"] = build_tiny_clip(root / "clip")
    return paths


def oric_args(world: dict[str, Path], kind: str, split: str, out: Path, *extra: str) -> list[str]:
    return [
        "build",
        kind,
        "--annotations",
        str(world[f"{split}_annotations"]),
        "--image-root",
        str(world[f"{split}_images"]),
        "--out",
        str(out),
        "--num-yes",
        "4",
        "--num-no",
        "4",
        "--yes-per-image",
        "1",
        "--no-per-image",
        "1",
        "--judge-threshold",
        "0.5",
        "--clip-model",
        str(world["clip"]),
        "--clip-cache",
        str(out.parent / "clip"),
        *extra,
    ]


def test_oric_builds_share_a_folder_and_refuse_to_overwrite_another_build(
    world: dict[str, Path], tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "data"
    assert run_cli(oric_args(world, "oric", "train", folder / "oric_train.json"), capsys)[0] == 0
    assert run_cli(oric_args(world, "oric-bench", "val", folder / "oric_bench.json"), capsys)[0] == 0
    train = json.loads((folder / "oric_train.manifest.json").read_text())
    bench = json.loads((folder / "oric_bench.manifest.json").read_text())
    assert (train["kind"], bench["kind"]) == ("train", "bench") and not (folder / "manifest.json").exists()
    assert train["build"]["command"] == "build oric" and train["output_sha256"] != bench["output_sha256"]

    before = (folder / "oric_train.json").read_bytes()
    code, _, err = run_cli(oric_args(world, "oric-bench", "val", folder / "oric_train.json"), capsys)
    assert code == 2 and "holds the output of `veritune build oric`" in err and "--force" in err
    assert (folder / "oric_train.json").read_bytes() == before
    assert (
        run_cli(oric_args(world, "oric", "train", folder / "oric_train.json"), capsys)[0] == 0
    )  # the same build: fine
    assert (
        run_cli(oric_args(world, "oric", "train", folder / "oric_train.json", "--seed", "7", "--force"), capsys)[0] == 0
    )
    assert json.loads((folder / "oric_train.manifest.json").read_text())["settings"]["seed"] == 7


def test_oric_build_that_produces_nothing_usable_fails(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "o" / "oric_train.json"
    code, _, err = run_cli(oric_args(world, "oric", "train", out, "--judge", f"{__name__}.AlwaysYes"), capsys)
    assert code == 2 and "Traceback" not in err
    assert (
        "error: nothing usable was built: no question (the judge found every object predictable from its context)"
        in err
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- predictions


def test_eval_run_refuses_predictions_of_another_model(
    tiny_qwen3vl: Path, tiny_qwen25vl: Path, tmp_path: Path, capsys
) -> None:
    bench, images = write_oric_bench(tmp_path / "data", questions=2)
    common = [
        "eval",
        "run",
        "--benchmarks",
        "oric_bench",
        "--data",
        f"oric_bench={bench}",
        "--image-root",
        str(images),
        "--max-new-tokens",
        "2",
        "--allow-unresolved",  # two tokens of a tiny random model: rarely a yes or a no
        "--out",
        str(tmp_path / "eval"),
    ]
    assert run_cli([*common, "--model", str(tiny_qwen3vl)], capsys)[0] == 0
    predictions = tmp_path / "eval" / "oric_bench" / "predictions.jsonl"
    header = json.loads(predictions.read_text().splitlines()[0])["veritune_predictions"]
    assert (
        header["model"]["path"] == str(tiny_qwen3vl)
        and len(header["model"]["sha256"]) == 64
        and len(header["data"]["sha256"]) == 64
    )

    code, _, err = run_cli([*common, "--model", str(tiny_qwen25vl)], capsys)
    assert code == 2 and "Traceback" not in err
    assert (
        f"{predictions}: it holds answers of another model ({tiny_qwen3vl}" in err
        and "add --force to start it over" in err
    )

    code, _, err = run_cli([*common, "--model", str(tiny_qwen3vl), "--limit", "1"], capsys)
    assert code == 2 and "it was made on other benchmark data" in err

    assert run_cli([*common, "--model", str(tiny_qwen25vl), "--force"], capsys)[0] == 0
    metrics = json.loads((tmp_path / "eval" / "oric_bench" / "metrics.json").read_text())
    assert metrics["provenance"]["model"]["path"] == str(tiny_qwen25vl) and metrics["counts"]["predicted"] == 8


def test_predictions_without_a_header_are_not_taken_for_this_models(tiny_qwen3vl: Path, tmp_path: Path, capsys) -> None:
    bench, images = write_oric_bench(tmp_path / "data", questions=1)
    stale = tmp_path / "eval" / "oric_bench" / "predictions.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"id": "1/p0", "prediction": "yes"}) + "\n")
    code, _, err = run_cli(
        [
            "eval",
            "run",
            "--model",
            str(tiny_qwen3vl),
            "--benchmarks",
            "oric_bench",
            "--data",
            f"oric_bench={bench}",
            "--image-root",
            str(images),
            "--out",
            str(tmp_path / "eval"),
        ],
        capsys,
    )
    assert code == 2 and "it has no veritune header" in err


# ---------------------------------------------------------------------------------------------- permissions


def test_outputs_honour_the_umask(tmp_path: Path) -> None:
    from core.io import atomic_write_bytes, atomic_write_json, atomic_write_text

    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    for write, data in ((atomic_write_text, "x"), (atomic_write_bytes, b"x"), (atomic_write_json, {"x": 1})):
        path = write(tmp_path / f"{write.__name__}.out", data)
        assert path.stat().st_mode & 0o777 == expected, write.__name__
    assert expected & 0o044, "a umask of 022 or 002 leaves outputs readable by the group"
