"""The ORIC builder: ROI split, judges, CLIP-guided negatives, the official layout, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_openai_server import FakeChatServer

from data_builders.llm_client import ChatClient
from data_builders.oric.annotations import ImageRecord, load_instances, roi_split, union_area
from data_builders.oric.clip_negatives import most_similar
from data_builders.oric.judges import CooccurrenceJudge, OpenAIJudge
from data_builders.oric.questions import paraphrases
from data_builders.synthetic_world import build_synthetic_world
from finetune.oric_data import get_oric_dataset
from veritune.cli import main
from veritune.errors import UserError

SHARED_ORIC = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "oric"


def coco(tmp_path: Path, boxes: list[tuple[int, str, list[float], int]], name: str = "instances.json") -> Path:
    classes = sorted({b[1] for b in boxes})
    data = {
        "images": [{"id": i, "file_name": f"{i}.jpg", "width": 100, "height": 100} for i in sorted({b[0] for b in boxes})],
        "annotations": [
            {"id": n, "image_id": img, "category_id": classes.index(cls) + 1, "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": crowd}
            for n, (img, cls, bbox, crowd) in enumerate(boxes, start=1)
        ],
        "categories": [{"id": i + 1, "name": c} for i, c in enumerate(classes)],
    }
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# ---- ROI split (Alg. 1)


def test_union_area_counts_overlap_once() -> None:
    assert union_area([[0, 0, 10, 10], [5, 5, 10, 10]]) == 175.0  # 100 + 100 - 25
    assert union_area([[0, 0, 10, 10], [2, 2, 3, 3]]) == 100.0  # nested box adds nothing
    assert union_area([[0, 0, 4, 4], [10, 10, 1, 1]]) == 17.0  # disjoint boxes add up


def test_roi_split_median_goes_to_non_roi() -> None:
    # Odd count: the median class itself is non-ROI.
    assert roi_split({"a": 9.0, "b": 4.0, "c": 1.0}) == (["c"], ["a", "b"])
    # Ties at the median are non-ROI.
    assert roi_split({"a": 5.0, "b": 5.0, "c": 5.0, "d": 1.0}) == (["d"], ["a", "b", "c"])
    # Even count: median is the mean of the middle two.
    assert roi_split({"a": 8.0, "b": 6.0, "c": 2.0, "d": 1.0}) == (["c", "d"], ["a", "b"])
    # Equal areas: nothing is strictly below the median.
    assert roi_split({"a": 3.0, "b": 3.0}) == ([], ["a", "b"])


def test_crowd_boxes_count_as_present(tmp_path: Path) -> None:
    path = coco(tmp_path, [(1, "person", [0, 0, 50, 50], 1), (1, "cup", [0, 0, 5, 5], 0)])
    images, names = load_instances(path)
    assert set(images[0].boxes) == {"person", "cup"}
    assert names == ["cup", "person"]


# ---- judges


def test_cooccurrence_judge_on_known_statistics() -> None:
    images = [
        ImageRecord(1, "1.jpg", 1, 1, {"table": [], "cup": []}),
        ImageRecord(2, "2.jpg", 1, 1, {"table": [], "cup": []}),
        ImageRecord(3, "3.jpg", 1, 1, {"table": [], "fork": []}),
        ImageRecord(4, "4.jpg", 1, 1, {"table": [], "cup": [], "fork": []}),
    ]
    judge = CooccurrenceJudge(images, threshold=0.5)
    # Leaving image 4 out: P(cup | table) = 2/3, P(fork | table) = 1/3.
    assert judge.probability(["table"], "cup", image_id=4) == pytest.approx(2 / 3)
    assert judge.probability(["table"], "fork", image_id=4) == pytest.approx(1 / 3)
    assert judge([(["table"], "cup", 4), (["table"], "fork", 4)]) == ["yes", "no"]


def test_openai_judge_parses_odd_answers_retries_and_caches(tmp_path: Path) -> None:
    answers = {"cup": "No.", "fork": "NO", "vase": "I think yes", "kite": "hmm"}

    def responder(request: dict) -> str:
        return next(a for name, a in answers.items() if f'"{name}"' in request["messages"][0]["content"])

    queries = [(["table", "person"], name, 1) for name in answers]
    with FakeChatServer(responder, fail_first=1) as server:
        client = ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite", backoff=0.01, concurrency=2)
        assert OpenAIJudge(client)(queries) == ["no", "no", "yes", None]
        assert len(server.requests) == 5  # four questions, one retried after the injected 500
        content = server.requests[-1]["messages"][0]["content"]
        assert "[table, person]" in content and "without using textual priors" in content.lower()
        assert server.requests[-1]["temperature"] == 0.0
        rerun = ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite")
        assert OpenAIJudge(rerun)(queries) == ["no", "no", "yes", None]
        assert len(server.requests) == 5 and rerun.requests_sent == 0


# ---- CLIP-guided negatives (Alg. 2)


def test_most_similar_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(37, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    best, sims = most_similar(embeddings, chunk_size=5)
    full = embeddings @ embeddings.T
    np.fill_diagonal(full, -np.inf)
    assert (best == full.argmax(axis=1)).all()
    assert np.allclose(sims, full.max(axis=1), atol=1e-6)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from veritune.tiny_clip import build_tiny_clip

    root = tmp_path_factory.mktemp("oric-world")
    paths = build_synthetic_world(root / "world", num_train_images=40, num_val_images=40)
    paths["clip"] = build_tiny_clip(root / "clip")
    return paths


def build(world: dict[str, Path], out: Path, kind: str = "oric", split: str = "train", *extra: str) -> list[dict]:
    code = main([
        "build", kind, "--annotations", str(world[f"{split}_annotations"]), "--image-root", str(world[f"{split}_images"]),
        "--out", str(out), "--num-yes", "10", "--num-no", "10", "--yes-per-image", "1", "--no-per-image", "1",
        "--judge-threshold", "0.5", "--clip-model", str(world["clip"]), "--clip-cache", str(out.parent / "clip"), *extra,
    ])  # fmt: skip
    assert code == 0
    return json.loads(out.read_text())


def test_train_file_matches_official_layout(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "train" / "oric_train.json")
    assert sum(i["label"] == "yes" for i in items) == 10 and sum(i["label"] == "no" for i in items) == 10
    official = json.loads((SHARED_ORIC / "oric_train.json").read_text())[0] if SHARED_ORIC.is_dir() else None
    for item in items:
        assert list(item)[:5] == ["id", "image", "target_object", "problem", "solution"]
        assert item["solution"] == f"<SOLUTION>{item['label']}</SOLUTION>"
        assert item["problem"].startswith(paraphrases(item["target_object"])[0])
        if official:
            assert item["problem"].replace(item["target_object"], "X").split("?")[1] == official["problem"].split("?")[1]
    assert [i["id"] for i in items] == list(range(1, 21))
    manifest = json.loads((tmp_path / "train" / "manifest.json").read_text())
    assert manifest["counts"] == {"questions": 20, "yes": 10, "no": 10, "images": len({i["image"] for i in items})}
    assert len(manifest["annotations_sha256"]) == 64 and manifest["judge"]["name"] == "cooccurrence"


def test_negatives_are_absent_and_positives_present(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "bench" / "oric_bench.json", "oric-bench", "val")
    images = {r.file_name: r for r in load_instances(world["val_annotations"])[0]}
    for item in items:
        present = item["target_object"] in images[item["image"]].boxes
        assert present == (item["label"] == "yes"), item
        assert item["problem"] == paraphrases(item["target_object"])
        assert item["solution"] == item["label"]
        if item["label"] == "no":
            assert isinstance(item["clip_score"], float) and item["judge_verdict"] is None
        else:
            assert item["judge_verdict"] == "no" and item["roi_area"] > 0 and item["object_size"] in ("small", "medium", "large")


def test_builder_output_loads_in_grpo(world: dict[str, Path], tmp_path: Path) -> None:
    build(world, tmp_path / "train" / "oric_train.json")
    dataset, report = get_oric_dataset(tmp_path / "train" / "oric_train.json", world["train_images"])
    assert report.kept == 20 and dataset[0]["solution"] in ("yes", "no")


def test_build_is_deterministic_and_rerun_uses_cache(world: dict[str, Path], tmp_path: Path) -> None:
    first = build(world, tmp_path / "a" / "oric_train.json")
    second = build(world, tmp_path / "a" / "again.json")
    assert first == second


def test_leakage_check(world: dict[str, Path], tmp_path: Path) -> None:
    build(world, tmp_path / "t" / "oric_train.json")
    build(world, tmp_path / "b" / "oric_bench.json", "oric-bench", "val")
    assert main(["build", "check-leakage", str(tmp_path / "t" / "oric_train.json"), str(tmp_path / "b" / "oric_bench.json")]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["build", "check-leakage", str(tmp_path / "t" / "oric_train.json"), str(tmp_path / "t" / "oric_train.json")])
    assert exit_info.value.code == 2


def test_review_sheet(world: dict[str, Path], tmp_path: Path) -> None:
    build(world, tmp_path / "r" / "oric_train.json", "oric", "train", "--review-html", str(tmp_path / "review.html"))
    page = (tmp_path / "review.html").read_text()
    assert page.count('class="card') == 20 and "data:image/jpeg;base64," in page


# ---- bad input


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "annotation file not found"),
        ("{oops", "not valid JSON"),
        ('{"images": [], "annotations": []}', "missing 'categories'"),
        ('{"images": [], "annotations": [{"id": 7, "bbox": [0, 0, 0, 5]}], "categories": []}', "annotation 0 (id 7): box with zero or negative size"),
    ],
)
def test_bad_annotation_files(tmp_path: Path, capsys, content: str | None, message: str) -> None:
    path = tmp_path / "instances.json"
    if content is not None:
        path.write_text(content)
    code, err = run_cli(["build", "oric", "--annotations", str(path), "--image-root", str(tmp_path), "--out", str(tmp_path / "o.json")], capsys)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def test_missing_images_are_listed_skipped_counted(world: dict[str, Path], tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    files = sorted(world["train_images"].iterdir())
    for f in files[2:]:
        (images / f.name).write_bytes(f.read_bytes())
    local = dict(world, train_images=images)
    build(local, tmp_path / "m" / "oric_train.json")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["skipped"]["missing_image_file"] == 2
    assert manifest["missing_images"] == [files[0].name, files[1].name]


def test_unreachable_judge_endpoint_is_a_clear_error(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, err = run_cli([
        "build", "oric", "--annotations", str(world["train_annotations"]), "--image-root", str(world["train_images"]),
        "--out", str(tmp_path / "o.json"), "--judge", "openai", "--llm-base-url", "http://127.0.0.1:9/v1",
        "--llm-model", "m", "--llm-cache", str(tmp_path / "c.sqlite"), "--llm-max-retries", "1", "--clip-model", str(world["clip"]),
        "--clip-cache", str(tmp_path / "clip"),
    ], capsys)  # fmt: skip
    assert code == 2 and "unreachable" in err
    assert not (tmp_path / "o.json").exists()


def test_no_half_written_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veritune import io as vio

    target = tmp_path / "out.json"
    target.write_text("[]")  # a previous, complete output

    def broken_dumps(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(vio.json, "dumps", broken_dumps)
    with pytest.raises(KeyboardInterrupt):
        vio.atomic_write_json(target, [1, 2, 3])
    assert target.read_text() == "[]" and list(tmp_path.iterdir()) == [target]
    with pytest.raises(UserError):
        load_instances(tmp_path / "none.json")
