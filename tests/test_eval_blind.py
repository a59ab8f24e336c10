"""The blind control, ``veritune eval run --blind``: every image a benchmark shows the model is a blank of the
image's size in one constant colour, swapped in where eval images are loaded; the run records and prints that
it was blind. (Bad ``--blind-fill`` values: ``tests/test_bad_input.py``.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from eval_fixtures import write_oric_bench
from PIL import Image

import eval_hooks.runner as runner
from core.images import BLIND_FILL, load_image_cached
from eval_hooks.cli import parse_blind_fill
from eval_hooks.runner import HEADER_KEY, read_predictions_file
from veritune.cli import main


def noise_image(path: Path, size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A PNG of random pixels (every colour differs from any fill) at ``path``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    image.save(path, format="PNG")
    return image


def only_colour(image: Image.Image) -> tuple[int, int, int] | None:
    """The one colour of a uniform image; None when it holds more than one."""
    colours = image.getcolors(maxcolors=1)
    return colours[0][1] if colours else None


@pytest.mark.parametrize("cache", [True, False])
def test_blank_has_the_size_of_the_image_and_the_fill(tmp_path: Path, cache: bool) -> None:
    path = tmp_path / "noise.png"
    noise_image(path, (37, 23))
    blank = load_image_cached(path, cache=cache, blind_fill=(10, 200, 30))
    assert blank.mode == "RGB" and blank.size == (37, 23)
    assert only_colour(blank) == (10, 200, 30)


def test_blank_does_not_depend_on_what_the_image_holds(tmp_path: Path) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    noise_image(first, (20, 30), seed=1)
    Image.new("RGB", (20, 30), (250, 5, 5)).save(second)
    assert (
        load_image_cached(first, blind_fill=BLIND_FILL).tobytes()
        == load_image_cached(second, blind_fill=BLIND_FILL).tobytes()
    )
    assert only_colour(load_image_cached(second, blind_fill=BLIND_FILL)) == (128, 128, 128)


def test_real_and_blank_images_never_answer_for_each_other_from_the_cache(tmp_path: Path) -> None:
    real_first, blank_first = tmp_path / "real_first.png", tmp_path / "blank_first.png"
    real_pixels = noise_image(real_first, (16, 12), seed=2).tobytes()
    assert load_image_cached(real_first).tobytes() == real_pixels  # the real image is now cached by its path
    assert only_colour(load_image_cached(real_first, blind_fill=(0, 0, 0))) == (0, 0, 0)
    assert only_colour(load_image_cached(real_first, blind_fill=(255, 255, 255))) == (255, 255, 255)  # colour: key
    other_pixels = noise_image(blank_first, (16, 12), seed=3).tobytes()
    assert only_colour(load_image_cached(blank_first, blind_fill=(0, 0, 0))) == (0, 0, 0)  # a blank of that size
    assert load_image_cached(blank_first).tobytes() == other_pixels
    assert load_image_cached(real_first).tobytes() == real_pixels


def test_parse_blind_fill_reads_three_numbers() -> None:
    assert parse_blind_fill(" 0, 64,255 ") == (0, 64, 255)


# ---- eval run --blind on the tiny model


@pytest.fixture(scope="module")
def oric(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("benchmarks")
    write_oric_bench(root, questions=4)
    return root


def eval_run(model: Path, data_root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "run",
        "--model",
        str(model),
        "--benchmarks",
        "oric_bench",
        "--data-root",
        str(data_root),
        "--out",
        str(out),
        "--limit",
        "2",
        "--max-new-tokens",
        "6",
        *extra,
    ]


def test_blind_run_shows_blanks_records_and_prints_it(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[tuple[Path, Image.Image]] = []
    load = runner.load_image_cached

    def recording_load(path: Path, **kwargs: object) -> Image.Image:
        image = load(path, **kwargs)
        shown.append((Path(path), image))
        return image

    monkeypatch.setattr(runner, "load_image_cached", recording_load)
    assert main(eval_run(tiny_qwen3vl, oric, tmp_path / "blind", "--blind")) == 0
    assert len(shown) == 8  # two questions, four paraphrases each, one image each
    for path, image in shown:
        with Image.open(path) as original:
            assert image.size == original.size and only_colour(original) != BLIND_FILL
        assert only_colour(image) == BLIND_FILL

    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == "blind control: images replaced by a blank 128,128,128 of the same size"
    assert "oric_bench" in printed and "macro/f1" in printed
    metrics = json.loads((tmp_path / "blind" / "oric_bench" / "metrics.json").read_text())
    assert metrics["generation"]["blind"] == {"fill": [128, 128, 128]}
    header, blind_predictions = read_predictions_file(tmp_path / "blind" / "oric_bench" / "predictions.jsonl")
    assert header["generation"]["blind"] == {"fill": [128, 128, 128]} and len(blind_predictions) == 8

    # Scored again without a model, the blind control keeps its mark (from the predictions' header) and says so.
    score = ["eval", "score", "--benchmarks", "oric_bench", "--data-root", str(oric), "--limit", "2"]
    assert main([*score, "--predictions", str(tmp_path / "blind"), "--out", str(tmp_path / "rescored")]) == 0
    rescored = json.loads((tmp_path / "rescored" / "oric_bench" / "metrics.json").read_text())
    assert rescored["generation"] == {"blind": {"fill": [128, 128, 128]}}
    assert rescored["metrics"] == metrics["metrics"]
    printed = capsys.readouterr().out
    assert printed.splitlines()[0] == (
        "blind control: images replaced by a blank 128,128,128 of the same size (from the predictions' header)"
    )

    # The same questions on a copy whose images really are grey blanks, with no --blind: the same answers.
    blank_root = tmp_path / "blank_benchmarks"
    shutil.copytree(oric, blank_root)
    for path in (blank_root / "coco" / "val2014").iterdir():
        with Image.open(path) as original:
            size = original.size
        Image.new("RGB", size, BLIND_FILL).save(path, format="PNG")  # lossless, whatever the file's name says
    monkeypatch.setattr(runner, "load_image_cached", load)
    assert main(eval_run(tiny_qwen3vl, blank_root, tmp_path / "real")) == 0
    real_header, real_predictions = read_predictions_file(tmp_path / "real" / "oric_bench" / "predictions.jsonl")
    assert real_predictions == blind_predictions
    assert "blind" not in real_header["generation"]  # a run on the real images writes the header it always did
    assert main([*score, "--predictions", str(tmp_path / "real"), "--out", str(tmp_path / "rescored_real")]) == 0
    assert "generation" not in json.loads((tmp_path / "rescored_real" / "oric_bench" / "metrics.json").read_text())
    assert json.loads((tmp_path / "real" / "oric_bench" / "metrics.json").read_text())["generation"]["blind"] is None
    assert "blind control" not in capsys.readouterr().out

    # A run on the real images never resumes from a blind control's answers (nor the other way round).
    with pytest.raises(SystemExit) as exit_info:
        main(eval_run(tiny_qwen3vl, oric, tmp_path / "blind"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "holds answers to blank 128,128,128 images (a blind control); this run shows the real images" in err
    assert HEADER_KEY not in err


def test_blind_results_go_to_wandb_beside_the_real_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wandb_offline import offline_history

    from eval_hooks.cli import log_eval_to_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    checkpoint = tmp_path / "run" / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    (checkpoint.parent / "wandb_run.json").write_text(json.dumps({"id": "trainrun123", "project": "veritune-test"}))
    results = {"finer_yn": {"metrics": {"negated_attr/neg_accuracy": 50.0}, "tables": {}, "samples": []}}
    log_eval_to_wandb(checkpoint, results, tmp_path / "eval", blind_fill=BLIND_FILL)
    rows = [row for row in offline_history(checkpoint.parent / "wandb") if "train/global_step" in row]
    assert rows[0]["eval/finer_yn_blind/negated_attr/neg_accuracy"] == 50.0 and rows[0]["train/global_step"] == 3
    assert not any(key.startswith("eval/finer_yn/") for row in rows for key in row)


def test_blind_samples_show_the_blank_in_wandb_and_the_report_says_blind(tmp_path: Path) -> None:
    import wandb

    from eval_hooks.callback import wandb_payload
    from veritune.report import benchmark_section

    image = tmp_path / "noise.png"
    noise_image(image, (40, 30))
    result = {
        "metrics": {"accuracy": 50.0},
        "samples": [{"id": "1", "image": str(image), "prediction": "yes"}],
        "generation": {"max_new_tokens": 4, "blind": {"fill": [10, 20, 30]}},
    }
    blind_cell = wandb_payload({"pope_blind": result}, 0, wandb)["eval/pope_blind/samples"].data[0][1]
    assert only_colour(blind_cell.image) == (10, 20, 30) and "blind control" in blind_cell._caption
    real = {**result, "generation": {"max_new_tokens": 4, "blind": None}}
    real_cell = wandb_payload({"pope": real}, 0, wandb)["eval/pope/samples"].data[0][1]
    assert only_colour(real_cell.image) is None  # the real image, noise

    html_text = "".join(benchmark_section("pope", {0: result}))
    assert "blind control</b>: images replaced by a blank 10,20,30" in html_text
    assert "(blind control: blank 10,20,30)" in html_text  # the thumbnail is the blank the model saw
    assert "blind control" not in "".join(benchmark_section("pope", {0: real}))
