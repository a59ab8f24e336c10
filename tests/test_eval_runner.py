"""The eval runner on tiny models: batching is exact, runs resume, scores match re-scoring, the hook runs
during training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_entry
from PIL import Image
from wandb_offline import offline_history

from eval_hooks.base import EvalItem
from eval_hooks.runner import generate_batch, load_model, read_predictions, run_items
from veritune.cli import main


@pytest.fixture(scope="module")
def qwen3(tiny_qwen3vl: Path):
    return load_model(tiny_qwen3vl, "float32")


def make_items(tmp_path: Path, count: int) -> list[EvalItem]:
    items = []
    for index in range(count):
        path = tmp_path / f"{index}.png"
        Image.new("RGB", (40 + 7 * index, 48), (index * 20 % 255, 90, 160)).save(path)
        words = " ".join(["very"] * (index % 4))
        items.append(EvalItem(id=str(index), prompt=f"Is there a {words} cat in the image?", images=[path], max_new_tokens=12))
    return items


def test_batched_equals_one_at_a_time(qwen3, tmp_path: Path) -> None:
    model, processor = qwen3
    items = make_items(tmp_path, 6)
    batched = run_items(model, processor, items, tmp_path / "batched" / "predictions.jsonl", batch_size=4)
    single = {item.id: generate_batch(model, processor, [item])[0] for item in items}
    assert batched == single


def test_multi_image_and_image_free_items(qwen3, tmp_path: Path) -> None:
    model, processor = qwen3
    pictures = make_items(tmp_path, 2)
    items = [
        EvalItem(id="two", prompt="Which image has more red?", images=[p.images[0] for p in pictures], max_new_tokens=6),
        EvalItem(id="none", prompt="Is the sky blue?", images=[], max_new_tokens=6),
    ]
    predictions = run_items(model, processor, items, tmp_path / "p.jsonl", batch_size=2)
    assert set(predictions) == {"two", "none"}


def test_interrupted_run_resumes_without_redoing(qwen3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, processor = qwen3
    items = make_items(tmp_path, 5)
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"id": "0", "prediction": "kept"}) + "\n" + json.dumps({"id": "1", "prediction": "kept"}) + "\n{\"id\": \"2\", \"pred")
    generated: list[str] = []
    import eval_hooks.runner as runner

    original = runner.generate_batch
    monkeypatch.setattr(runner, "generate_batch", lambda m, p, batch: generated.extend(i.id for i in batch) or original(m, p, batch))
    predictions = run_items(model, processor, items, path, batch_size=2)
    assert sorted(generated) == ["2", "3", "4"]
    assert predictions["0"] == predictions["1"] == "kept"
    assert set(read_predictions(path)) == {"0", "1", "2", "3", "4"}


def test_missing_images_are_skipped(qwen3, tmp_path: Path) -> None:
    model, processor = qwen3
    items = make_items(tmp_path, 2)
    items[1].missing_images = [Path("gone.png")]
    assert set(run_items(model, processor, items, tmp_path / "p.jsonl")) == {"0"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bench")
    records = []
    for index in range(6):
        Image.new("RGB", (64, 64), (30 * index, 100, 50)).save(root / f"COCO_val2014_{index:012d}.jpg")
        name = ["cup", "apple", "dog"][index % 3]
        article = "an" if name == "apple" else "a"
        records.append({"id": index + 1, "image": f"COCO_val2014_{index:012d}.jpg", "target_object": name,
                        "problem": [t.format(o=f"{article} {name}") for t in ("Is there {o} in the image?", "Does the image contain {o}?",
                                    "Have you noticed {o} in the image?", "Can you see {o} in the image?")],
                        "solution": "yes" if index % 2 else "no"})  # fmt: skip
    (root / "oric_bench.json").write_text(json.dumps(records))
    return root / "oric_bench.json", root


def test_eval_run_then_score_match(tiny_qwen3vl: Path, bench: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    data, images = bench
    args = ["eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", "oric_bench,oric_bench_r1",
            "--data", f"oric_bench={data}", "--data", f"oric_bench_r1={data}", "--image-root", str(images),
            "--out", str(tmp_path), "--batch-size", "8"]  # fmt: skip
    assert main(args) == 0
    run_metrics = json.loads((tmp_path / "oric_bench_r1" / "metrics.json").read_text())
    assert run_metrics["counts"]["predicted"] == 24
    capsys.readouterr()
    assert main(["eval", "score", "oric_bench_r1", "--data", str(data), "--image-root", str(images),
                 "--predictions", str(tmp_path / "oric_bench_r1" / "predictions.jsonl")]) == 0  # fmt: skip
    scored = json.loads(capsys.readouterr().out)
    assert scored["metrics"] == run_metrics["metrics"]
    assert (tmp_path / "oric_bench" / "metrics.json").is_file()


def test_second_family_evaluates(tiny_qwen25vl: Path, bench: tuple[Path, Path], tmp_path: Path) -> None:
    data, images = bench
    assert main(["eval", "run", "--model", str(tiny_qwen25vl), "--benchmarks", "oric_bench", "--data", f"oric_bench={data}",
                 "--image-root", str(images), "--out", str(tmp_path), "--limit", "2"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "oric_bench" / "metrics.json").read_text())["counts"]["items"] == 8


def test_eval_hook_during_grpo(tiny_qwen3vl: Path, bench: tuple[Path, Path], tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data, images = bench
    train, train_images = write_oric_fixture(tmp_path / "train")
    result = run_entry(
        "grpo.py", "recipes/tiny_oric_demo.yaml", "--model_name_or_path", tiny_qwen3vl, "--dataset_path", train,
        "--image_root", train_images, "--output_dir", tmp_path / "run", "--max_steps", "2", "--save_steps", "1",
        "--eval_on_save", "true", "--eval_benchmarks", "oric_bench_r1", "missing_bench", "--eval_limit", "2",
        "--eval_data", f"oric_bench_r1={data}", "--eval_image_root", images,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for step in (1, 2):
        metrics = json.loads((tmp_path / "run" / "eval" / f"checkpoint-{step}" / "oric_bench_r1" / "metrics.json").read_text())
        assert "macro/f1" in metrics["metrics"]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2  # the failing second benchmark never stopped training
    assert "eval hook failed" in result.stderr
    rows = offline_history(tmp_path / "run" / "wandb")
    assert not any("eval/oric_bench_r1/macro/f1" in row for row in rows)  # one bad benchmark fails the whole hook


def test_eval_watch_picks_up_a_checkpoint_that_appears(tiny_qwen3vl: Path, bench: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil
    import threading
    import time

    from eval_hooks.watch import watch

    data, images = bench
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    evaluated: list[int] = []
    thread = threading.Thread(
        target=lambda: evaluated.extend(watch(run_dir, ["oric_bench"], data={"oric_bench": data}, image_root=images, limit=1,
                                              interval=0.2, timeout=120)),  # fmt: skip
    )
    thread.start()
    time.sleep(1.0)  # the watcher is already polling an empty run directory
    checkpoint = run_dir / "checkpoint-5"
    shutil.copytree(tiny_qwen3vl, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))
    (run_dir / "trainer_state.json").write_text(json.dumps({"global_step": 5}))  # training finished
    thread.join(timeout=150)
    assert evaluated == [5]
    assert json.loads((run_dir / "eval" / "checkpoint-5" / "oric_bench" / "metrics.json").read_text())["counts"]["items"] == 4
    # Idempotent: a second pass finds nothing new.
    assert watch(run_dir, ["oric_bench"], data={"oric_bench": data}, image_root=images, limit=1, once=True) == []
