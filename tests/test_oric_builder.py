"""The ORIC builder: ROI split, judges, CLIP-guided negatives, the official layout, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_openai_server import FakeChatServer
from PIL import Image

from core.errors import UserError
from core.llm_client import PROBE_PROMPT, ChatClient
from data_builders.oric.annotations import ImageRecord, describe, load_instances, roi_split, union_area
from data_builders.oric.clip_negatives import TEXT_TEMPLATE, ClipScorer, most_similar
from data_builders.oric.judges import CooccurrenceJudge, OpenAIJudge, get_judge
from data_builders.oric.questions import paraphrases, r1_prompt, with_article
from data_builders.oric.review import sample_for_review
from finetune.oric_data import get_oric_dataset
from miniature.world import build_synthetic_world
from veritune.cli import main

SHARED_ORIC = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "oric"
needs_official = pytest.mark.skipif(not SHARED_ORIC.is_dir(), reason="official ORIC files not present")


def coco(tmp_path: Path, boxes: list[tuple[int, str, list[float], int]], name: str = "instances.json") -> Path:
    """A COCO instances file from ``(image_id, class, bbox, iscrowd)`` rows."""
    classes = sorted({b[1] for b in boxes})
    data = {
        "images": [
            {"id": i, "file_name": f"{i}.jpg", "width": 100, "height": 100} for i in sorted({b[0] for b in boxes})
        ],
        "annotations": [
            {
                "id": n,
                "image_id": img,
                "category_id": classes.index(cls) + 1,
                "bbox": bbox,
                "area": bbox[2] * bbox[3],
                "iscrowd": crowd,
            }
            for n, (img, cls, bbox, crowd) in enumerate(boxes, start=1)
        ],
        "categories": [{"id": i + 1, "name": c} for i, c in enumerate(classes)],
    }
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# ---- ROI split (Alg. 1)


@pytest.mark.parametrize(
    ("boxes", "area"),
    [
        ([[0, 0, 10, 10], [5, 5, 10, 10]], 175.0),  # overlap counted once: 100 + 100 - 25
        ([[0, 0, 10, 10], [2, 2, 3, 3]], 100.0),  # a nested box adds nothing
        ([[0, 0, 4, 4], [10, 10, 1, 1]], 17.0),  # disjoint boxes add up
        ([[0, 0, 10, 10], [0, 0, 10, 10]], 100.0),  # duplicates count once
        ([[0, 0, 2, 6], [0, 0, 6, 2], [4, 0, 2, 6]], 28.0),  # three boxes, pairwise overlaps (a U shape)
    ],
)
def test_union_area_is_exact(boxes: list[list[float]], area: float) -> None:
    assert union_area(boxes) == area


@pytest.mark.parametrize(
    ("areas", "expected"),
    [
        ({"a": 9.0, "b": 4.0, "c": 1.0}, (["c"], ["a", "b"])),  # odd count: the median class is non-ROI
        ({"a": 5.0, "b": 5.0, "c": 5.0, "d": 1.0}, (["d"], ["a", "b", "c"])),  # ties at the median are non-ROI
        ({"a": 8.0, "b": 6.0, "c": 2.0, "d": 1.0}, (["c", "d"], ["a", "b"])),  # even count: mean of the middle two
        ({"a": 3.0, "b": 3.0}, ([], ["a", "b"])),  # equal areas: nothing is strictly below the median
        ({"a": 7.0, "b": 2.0}, (["b"], ["a"])),  # two classes: the smaller is the ROI
    ],
)
def test_roi_split_at_the_median(areas: dict[str, float], expected: tuple[list[str], list[str]]) -> None:
    assert roi_split(areas) == expected


def test_roi_split_uses_the_union_not_the_sum(tmp_path: Path) -> None:
    # cup: two overlapping 10x10 boxes, union 175 (sum 200); bowl: 180; oven: 300. Median 180.
    path = coco(
        tmp_path,
        [
            (1, "cup", [0, 0, 10, 10], 0),
            (1, "cup", [5, 5, 10, 10], 0),
            (1, "bowl", [50, 50, 18, 10], 0),
            (1, "oven", [20, 60, 30, 10], 0),
        ],
    )
    record = load_instances(path)[0][0]
    assert describe(record) == {"cup": 175.0, "bowl": 180.0, "oven": 300.0}
    assert roi_split(describe(record)) == (["cup"], ["oven", "bowl"])


def test_crowd_boxes_count_as_present(tmp_path: Path) -> None:
    path = coco(tmp_path, [(1, "person", [0, 0, 50, 50], 1), (1, "cup", [0, 0, 5, 5], 0)])
    images, names = load_instances(path)
    assert images[0].boxes == {"person": [[0, 0, 50, 50]], "cup": [[0, 0, 5, 5]]}
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


def test_cooccurrence_judge_averages_over_context_classes() -> None:
    images = [
        ImageRecord(1, "1.jpg", 1, 1, {"car": [], "bench": [], "dog": []}),
        ImageRecord(2, "2.jpg", 1, 1, {"car": [], "dog": []}),
        ImageRecord(3, "3.jpg", 1, 1, {"bench": []}),
    ]
    # P(dog | car) = 2/2, P(dog | bench) = 1/2: the mean is 3/4.
    assert CooccurrenceJudge(images).probability(["car", "bench"], "dog") == pytest.approx(0.75)


ODD_ANSWERS = {"cup": "No.", "fork": "NO", "vase": "I think yes", "kite": "hmm"}


def odd_responder(request: dict) -> str:
    return next(answer for name, answer in ODD_ANSWERS.items() if f'"{name}"' in request["messages"][0]["content"])


def judge_queries() -> list[tuple[list[str], str, int]]:
    return [(["table", "person"], name, 1) for name in ODD_ANSWERS]


def test_openai_judge_parses_odd_answers(tmp_path: Path) -> None:
    with FakeChatServer(odd_responder) as server:
        client = ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite", concurrency=2)
        assert OpenAIJudge(client)(judge_queries()) == ["no", "no", "yes", None]


def test_openai_judge_sends_the_fig6_question(tmp_path: Path) -> None:
    with FakeChatServer(odd_responder) as server:
        OpenAIJudge(ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite"))(judge_queries()[:1])
    (request,) = server.requests
    content = request["messages"][0]["content"]
    assert request["model"] == "gpt-judge" and request["temperature"] == 0.0 and len(request["messages"]) == 1
    assert "[table, person]" in content and '"cup"' in content
    assert "without using textual priors" in content.lower() and "answer yes or no" in content.lower()


def test_openai_judge_retries_after_an_injected_500(tmp_path: Path) -> None:
    with FakeChatServer(odd_responder, fail_first=1) as server:
        client = ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite", backoff=0.01, concurrency=1)
        assert OpenAIJudge(client)(judge_queries()) == ["no", "no", "yes", None]
    assert len(server.requests) == 5 and server.requests[0] == server.requests[1]  # the failed one, sent again


def test_openai_judge_rerun_sends_zero_requests(tmp_path: Path) -> None:
    with FakeChatServer(odd_responder) as server:
        OpenAIJudge(ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite"))(judge_queries())
        rerun = ChatClient(server.base_url, "gpt-judge", cache_path=tmp_path / "c.sqlite")
        assert OpenAIJudge(rerun)(judge_queries()) == ["no", "no", "yes", None]
    assert len(server.requests) == 4 and rerun.requests_sent == 0 and rerun.cache_hits == 4


def test_openai_judge_ignores_reasoning_before_the_answer(tmp_path: Path) -> None:
    answers = iter(["<think>A vase could be there, so yes? Or no.</think>\n\nNo.", "<think>unfinished yes"])
    with FakeChatServer(lambda request: next(answers)) as server:
        client = ChatClient(server.base_url, "qwen3", cache_path=tmp_path / "c.sqlite", concurrency=1)
        assert OpenAIJudge(client)(judge_queries()[:2]) == ["no", None]


class AlwaysNo:
    """A custom judge reached through the dotted-path fallback."""

    name = "always-no"

    def __init__(self, images: list[ImageRecord], **options: object) -> None:
        self.images = images

    def __call__(self, queries: list) -> list[str]:
        return ["no"] * len(queries)

    def describe(self) -> dict[str, str]:
        return {"name": self.name}


def test_judge_registry_dotted_path_fallback() -> None:
    judge = get_judge(f"{__name__}.AlwaysNo", [], threshold=0.3)
    assert isinstance(judge, AlwaysNo) and judge([(["a"], "b", 1)]) == ["no"]


def test_judge_registry_unknown_name_is_an_error() -> None:
    with pytest.raises(UserError, match="unknown judge 'oracle'; known: cooccurrence, openai"):
        get_judge("oracle", [])


def test_openai_judge_needs_endpoint_and_model() -> None:
    with pytest.raises(UserError, match="--context-judge openai needs --llm-base-url and --llm-model"):
        get_judge("openai", [], base_url=None, model="m")


# ---- questions


def test_articles_follow_the_first_letter() -> None:
    assert [with_article(n) for n in ("umbrella", "apple", "elephant", "cup", "traffic light")] == [
        "an umbrella",
        "an apple",
        "an elephant",
        "a cup",
        "a traffic light",
    ]


@needs_official
def test_question_wording_reproduces_every_official_item() -> None:
    bench = json.loads((SHARED_ORIC / "oric_bench.json").read_text())
    train = json.loads((SHARED_ORIC / "oric_train.json").read_text())
    assert all(paraphrases(item["target_object"]) == item["problem"] for item in bench)
    assert all(r1_prompt(item["target_object"]) == item["problem"] for item in train)


# ---- CLIP-guided negatives (Alg. 2)


def unit_rows(count: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    embeddings = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)


def test_most_similar_matches_brute_force() -> None:
    embeddings = unit_rows(37)
    best, sims = most_similar(embeddings, chunk_size=5)
    full = embeddings @ embeddings.T
    np.fill_diagonal(full, -np.inf)
    assert (best == full.argmax(axis=1)).all()
    assert np.allclose(sims, full.max(axis=1), atol=1e-6)


def test_most_similar_for_chosen_queries_matches_brute_force() -> None:
    embeddings = unit_rows(29, seed=1)
    queries = [28, 3, 3, 0, 17]
    best, _ = most_similar(embeddings, queries, chunk_size=2)
    full = embeddings @ embeddings.T
    np.fill_diagonal(full, -np.inf)
    assert best.tolist() == full.argmax(axis=1)[queries].tolist()


def test_most_similar_never_returns_the_image_itself() -> None:
    embeddings = np.repeat(unit_rows(1), 4, axis=0)  # four identical images
    best, sims = most_similar(embeddings)
    assert best.tolist() == [1, 0, 0, 0] and np.allclose(sims, 1.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from miniature.tiny.clip import build_tiny_clip

    root = tmp_path_factory.mktemp("oric-world")
    paths = build_synthetic_world(
        root / "world", num_train_images=120, num_val_images=120
    )  # enough incongruous objects
    paths["clip"] = build_tiny_clip(root / "clip")
    return paths


def test_tiny_clip_loads_with_the_clip_classes(world: dict[str, Path]) -> None:
    from transformers import CLIPModel, CLIPProcessor

    model, processor = CLIPModel.from_pretrained(world["clip"]), CLIPProcessor.from_pretrained(world["clip"])
    texts = processor(text=[TEXT_TEMPLATE.format(name=n) for n in ("cup", "bowl")], return_tensors="pt", padding=True)
    assert texts["input_ids"][0].tolist() != texts["input_ids"][1].tolist()
    pixels = processor(images=[Image.open(next(world["val_images"].iterdir()))], return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 32, 32) and model.config.projection_dim == 16


def test_clip_embeddings_are_cached_per_model_and_image(world: dict[str, Path], tmp_path: Path) -> None:
    images = sorted(world["val_images"].iterdir())[:5]
    first, _ = ClipScorer(str(world["clip"]), cache_dir=tmp_path).embed_images(images)
    again = ClipScorer(str(world["clip"]), cache_dir=tmp_path)
    calls = []
    original = again.model.get_image_features
    again.model.get_image_features = lambda **kw: calls.append(len(kw["pixel_values"])) or original(**kw)
    second, _ = again.embed_images(images)
    assert calls == [] and np.array_equal(first, second)
    edited = tmp_path / "edited.jpg"
    edited.write_bytes(images[0].read_bytes())
    again.embed_images([*images, edited])
    assert calls == [1]  # only the new file is embedded


def test_unreadable_images_are_reported_not_embedded(world: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    images = sorted(world["val_images"].iterdir())[:2]
    embeddings, unreadable = ClipScorer(str(world["clip"])).embed_images([images[0], broken, images[1]])
    assert embeddings.shape == (2, 16) and unreadable == [broken]
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def build(
    world: dict[str, Path], out: Path, kind: str = "oric", split: str = "train", *extra: str, per_image: str = "1"
) -> list[dict]:
    code = main(
        [
            "build",
            kind,
            "--annotations",
            str(world[f"{split}_annotations"]),
            "--image-root",
            str(world[f"{split}_images"]),
            "--out",
            str(out),
            "--num-yes",
            "10",
            "--num-no",
            "10",
            "--yes-per-image",
            per_image,
            "--no-per-image",
            per_image,
            "--context-judge-threshold",
            "0.5",
            "--clip-model",
            str(world["clip"]),
            "--clip-cache",
            str(out.parent / "clip"),
            *extra,
        ]
    )
    assert code == 0
    return json.loads(out.read_text())


PROVENANCE = [
    "label",
    "source_image_id",
    "similar_image_id",
    "roi_area",
    "object_size",
    "judge_verdict",
    "clip_score",
    "image_similarity",
]


@needs_official
def test_train_file_matches_official_layout(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "train" / "oric_train.json")
    official = json.loads((SHARED_ORIC / "oric_train.json").read_text())
    assert [list(item) for item in items] == [list(official[0]) + PROVENANCE] * 20
    for item in items:
        assert {k: type(item[k]) for k in official[0]} == {k: type(v) for k, v in official[0].items()}
        assert item["problem"] == r1_prompt(item["target_object"])
        assert item["solution"] == f"<SOLUTION>{item['label']}</SOLUTION>"
    assert [i["id"] for i in items] == list(range(1, 21))
    assert sum(i["label"] == "yes" for i in items) == 10 and sum(i["label"] == "no" for i in items) == 10


@needs_official
def test_bench_file_matches_official_layout(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "bench" / "oric_bench.json", "oric-bench", "val")
    official = json.loads((SHARED_ORIC / "oric_bench.json").read_text())
    assert [list(item) for item in items] == [list(official[0]) + PROVENANCE] * 20
    for item in items:
        assert {k: type(item[k]) for k in official[0]} == {k: type(v) for k, v in official[0].items()}
        assert item["problem"] == paraphrases(item["target_object"]) and item["solution"] == item["label"]
    written = (tmp_path / "bench" / "oric_bench.json").read_text()
    assert written.startswith('[\n    {\n        "id": 1,\n        "image": ')  # the official files' 4-space indent


def test_bench_groups_two_yes_then_two_no_per_pair(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "bench" / "oric_bench.json", "oric-bench", "val", per_image="2")
    groups = [items[i : i + 4] for i in range(0, len(items) - len(items) % 4, 4)]
    assert groups
    for group in groups:  # as in the official bench: I's two yes questions, then I''s two no questions
        assert [i["label"] for i in group] == ["yes", "yes", "no", "no"]
        assert group[0]["image"] == group[1]["image"] != group[2]["image"] == group[3]["image"]
        assert group[0]["similar_image_id"] == group[2]["source_image_id"]


def test_positives_are_present_roi_objects_judged_unpredictable(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "bench" / "oric_bench.json", "oric-bench", "val")
    images = {r.file_name: r for r in load_instances(world["val_annotations"])[0]}
    for item in (i for i in items if i["label"] == "yes"):
        areas = describe(images[item["image"]])
        assert item["target_object"] in roi_split(areas)[0]
        assert item["roi_area"] == round(areas[item["target_object"]], 2) and item["judge_verdict"] == "no"


def test_negatives_are_absent_and_the_top_clip_scores(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "bench" / "oric_bench.json", "oric-bench", "val")
    images = {r.file_name: r for r in load_instances(world["val_annotations"])[0]}
    names = load_instances(world["val_annotations"])[1]
    scorer = ClipScorer(str(world["clip"]))
    negatives = [i for i in items if i["label"] == "no"]
    assert negatives
    for item in negatives:
        record = images[item["image"]]
        assert item["target_object"] not in record.boxes
        absent = [n for n in names if n not in record.boxes]
        embedding, _ = scorer.embed_images([world["val_images"] / item["image"]])
        scores = dict(zip(absent, scorer.clip_scores(embedding[0], absent).tolist()))
        assert item["clip_score"] == pytest.approx(max(scores.values()), abs=1e-3)
        assert scores[item["target_object"]] == max(scores.values())
    assert TEXT_TEMPLATE == "an image contains {name}"


def test_manifest_records_inputs_settings_and_counts(world: dict[str, Path], tmp_path: Path) -> None:
    items = build(world, tmp_path / "train" / "oric_train.json")
    manifest = json.loads((tmp_path / "train" / "oric_train.manifest.json").read_text())
    assert manifest["counts"] == {"questions": 20, "yes": 10, "no": 10, "images": len({i["image"] for i in items})}
    assert len(manifest["annotations_sha256"]) == 64 and manifest["judge"] == {"name": "cooccurrence", "threshold": 0.5}
    assert manifest["clip_model"] == str(world["clip"]) and manifest["settings"]["seed"] == 42
    assert manifest["skipped"]["fewer_than_2_classes"] == 0 and "torch" in manifest["versions"]


def test_builder_output_loads_in_grpo(world: dict[str, Path], tmp_path: Path) -> None:
    build(world, tmp_path / "train" / "oric_train.json")
    dataset, report = get_oric_dataset(tmp_path / "train" / "oric_train.json", world["train_images"])
    assert report.kept == 20 and dataset[0]["solution"] in ("yes", "no")


def test_build_is_deterministic(world: dict[str, Path], tmp_path: Path) -> None:
    first = build(world, tmp_path / "a" / "oric_train.json")
    second = build(world, tmp_path / "b" / "oric_train.json")
    assert first == second


def test_seed_changes_the_sample(world: dict[str, Path], tmp_path: Path) -> None:
    first = build(world, tmp_path / "a" / "oric_train.json")
    second = build(world, tmp_path / "b" / "oric_train.json", "oric", "train", "--seed", "7")
    assert [i["image"] for i in first] != [i["image"] for i in second]


def test_leakage_check_passes_disjoint_files(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    build(world, tmp_path / "t" / "oric_train.json")
    build(world, tmp_path / "b" / "oric_bench.json", "oric-bench", "val")
    assert (
        main(
            ["build", "check-leakage", str(tmp_path / "t" / "oric_train.json"), str(tmp_path / "b" / "oric_bench.json")]
        )
        == 0
    )
    assert "no shared images" in capsys.readouterr().out


def test_leakage_check_refuses_shared_images(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    build(world, tmp_path / "t" / "oric_train.json")
    code, err = run_cli(
        ["build", "check-leakage", str(tmp_path / "t" / "oric_train.json"), str(tmp_path / "t" / "oric_train.json")],
        capsys,
    )
    assert code == 2 and "appear in both" in err


def test_exclude_images_from_keeps_files_disjoint(world: dict[str, Path], tmp_path: Path) -> None:
    first = build(world, tmp_path / "a" / "oric_train.json")
    second = build(
        world,
        tmp_path / "b" / "oric_train.json",
        "oric",
        "train",
        "--exclude-images-from",
        str(tmp_path / "a" / "oric_train.json"),
    )
    assert second and not {i["image"] for i in first} & {i["image"] for i in second}
    manifest = json.loads((tmp_path / "b" / "oric_train.manifest.json").read_text())
    assert manifest["skipped"]["excluded_image"] == len({i["image"] for i in first})


def test_review_sheet_has_one_card_per_item_with_boxes(world: dict[str, Path], tmp_path: Path) -> None:
    build(world, tmp_path / "r" / "oric_train.json", "oric", "train", "--review-html", str(tmp_path / "review.html"))
    page = (tmp_path / "review.html").read_text()
    assert page.count('class="card yes"') == 10 and page.count('class="card no"') == 10
    assert page.count("data:image/jpeg;base64,") == 20


def test_review_sample_is_balanced() -> None:
    items = [{"id": i, "label": "yes" if i % 4 else "no"} for i in range(400)]  # 300 yes, 100 no
    chosen = sample_for_review(items, 300, seed=1)
    assert len(chosen) == 300 and sum(i["label"] == "no" for i in chosen) == 100
    assert sum(i["label"] == "yes" for i in sample_for_review(items, 100)) == 50


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
        ("[1, 2]", "expected a COCO instances object"),
        ('{"images": [], "annotations": []}', "missing 'categories'"),
        ('{"images": {}, "annotations": [], "categories": []}', "'images' must be a list of objects"),
        ('{"images": [{"id": 1}], "annotations": [], "categories": []}', "images[0] has no 'file_name'"),
        ('{"images": [], "annotations": [], "categories": [{"id": 1}]}', "categories[0] has no 'name'"),
        (
            '{"images": [], "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 0, 5]}], '
            '"categories": []}',
            "annotation 0 (id 7): box with zero or negative size",
        ),
        (
            '{"images": [], "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, -1]}], '
            '"categories": []}',
            "annotation 0 (id 7): box with zero or negative size",
        ),
        (
            '{"images": [], "annotations": [{"id": 8, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5]}], '
            '"categories": []}',
            "annotation 0 (id 8): bbox must be [x, y, width, height]",
        ),
    ],
)
def test_bad_annotation_files(tmp_path: Path, capsys, content: str | None, message: str) -> None:
    path = tmp_path / "instances.json"
    if content is not None:
        path.write_text(content)
    code, err = run_cli(
        ["build", "oric", "--annotations", str(path), "--image-root", str(tmp_path), "--out", str(tmp_path / "o.json")],
        capsys,
    )
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize(("flag", "value"), [("--yes-per-image", "0"), ("--num-no", "-1"), ("--min-classes", "1")])
def test_bad_numbers_are_one_line_errors(tmp_path: Path, capsys, flag: str, value: str) -> None:
    code, err = run_cli(
        ["build", "oric", "--annotations", "x.json", "--image-root", str(tmp_path), "--out", "o.json", flag, value],
        capsys,
    )
    assert code == 2 and err.startswith(f"error: {flag} must be at least")


def test_missing_image_root_is_an_error(tmp_path: Path, capsys) -> None:
    code, err = run_cli(
        ["build", "oric", "--annotations", "x.json", "--image-root", str(tmp_path / "nope"), "--out", "o.json"], capsys
    )
    assert code == 2 and "--image-root: not a directory" in err


def test_missing_and_unreadable_images_are_listed_skipped_counted(
    world: dict[str, Path], tmp_path: Path, capsys
) -> None:
    images = tmp_path / "images"
    images.mkdir()
    files = sorted(world["train_images"].iterdir())
    for f in files[3:]:
        (images / f.name).write_bytes(f.read_bytes())
    (images / files[2].name).write_bytes(b"\xff\xd8 truncated")
    build(dict(world, train_images=images), tmp_path / "m" / "oric_train.json")
    manifest = json.loads((tmp_path / "m" / "oric_train.manifest.json").read_text())
    assert manifest["skipped"]["missing_image_file"] == 2 and manifest["missing_images"] == [
        files[0].name,
        files[1].name,
    ]
    assert manifest["skipped"]["unreadable_image_file"] == 1 and manifest["unreadable_images"] == [files[2].name]
    assert (
        f"missing image files (2, all listed in the manifest): {files[0].name}, {files[1].name}"
        in capsys.readouterr().err
    )


def test_single_class_images_are_skipped_and_counted(world: dict[str, Path], tmp_path: Path) -> None:
    data = json.loads(world["train_annotations"].read_text())
    single = {image["id"] for image in data["images"][:6]}
    first_class = {}
    for annotation in data["annotations"]:
        first_class.setdefault(annotation["image_id"], annotation["category_id"])
    data["annotations"] = [
        a for a in data["annotations"] if a["image_id"] not in single or a["category_id"] == first_class[a["image_id"]]
    ]
    edited = tmp_path / "instances.json"
    edited.write_text(json.dumps(data))
    items = build(dict(world, train_annotations=edited), tmp_path / "s" / "oric_train.json")
    manifest = json.loads((tmp_path / "s" / "oric_train.manifest.json").read_text())
    assert manifest["skipped"]["fewer_than_2_classes"] == 6
    names = {image["id"]: image["file_name"] for image in data["images"]}
    assert not {names[i] for i in single} & {i["image"] for i in items if i["label"] == "yes"}


def test_shortfall_is_counted_and_warned(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    items = build(world, tmp_path / "f" / "oric_train.json", "oric", "train", "--num-yes", "500")
    manifest = json.loads((tmp_path / "f" / "oric_train.manifest.json").read_text())
    yes = sum(i["label"] == "yes" for i in items)
    assert yes < 500 and manifest["skipped"]["shortfall_yes"] == 500 - yes
    assert "warning: asked for 500 yes + 10 no" in capsys.readouterr().err


def test_unreachable_judge_endpoint_is_a_clear_error(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, err = run_cli(
        [
            "build",
            "oric",
            "--annotations",
            str(world["train_annotations"]),
            "--image-root",
            str(world["train_images"]),
            "--out",
            str(tmp_path / "o.json"),
            "--context-judge",
            "openai",
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
            "--llm-model",
            "m",
            "--llm-cache",
            str(tmp_path / "c.sqlite"),
            "--llm-max-retries",
            "1",
            "--clip-model",
            str(world["clip"]),
            "--clip-cache",
            str(tmp_path / "clip"),
        ],
        capsys,
    )
    assert code == 2 and "unreachable" in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def openai_judge_args(world: dict[str, Path], tmp_path: Path, out: Path, *extra: str) -> list[str]:
    """``veritune build oric`` on the train split with the OpenAI-compatible judge, its cache in ``tmp_path``
    and no retries; ``extra`` adds the endpoint and counts."""
    return [
        "build",
        "oric",
        "--annotations",
        str(world["train_annotations"]),
        "--image-root",
        str(world["train_images"]),
        "--out",
        str(out),
        "--context-judge",
        "openai",
        "--llm-model",
        "judge",
        "--llm-cache",
        str(tmp_path / "c.sqlite"),
        "--llm-max-retries",
        "0",
        "--clip-model",
        str(world["clip"]),
        "--clip-cache",
        str(tmp_path / "clip"),
        *extra,
    ]


def test_openai_judge_build_resumes_after_an_outage(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    counts = ["--num-yes", "6", "--num-no", "6", "--yes-per-image", "1", "--no-per-image", "1"]
    args = openai_judge_args(world, tmp_path, tmp_path / "o.json", *counts, "--llm-concurrency", "1")
    answered: list[dict] = []

    def flaky(request: dict) -> str | tuple[int, str]:  # five answers, then an outage
        if request["messages"][0]["content"] == PROBE_PROMPT:  # the CLI's check of the endpoint, before the build
            return "Yes."
        answered.append(request)
        return "No." if len(answered) <= 5 else (503, "{}")

    with FakeChatServer(flaky) as server:
        code, err = run_cli([*args, "--llm-base-url", server.base_url], capsys)
        assert code == 2 and "answers received so far are cached" in err and not (tmp_path / "o.json").exists()
        server.responder = lambda request: "No."
        before = len(server.requests)
        assert main([*args, "--llm-base-url", server.base_url]) == 0
        resent = [r for r in server.requests[before:] if r in answered[:5]]
    assert resent == [] and len(json.loads((tmp_path / "o.json").read_text())) == 12


def test_fully_cached_openai_judge_rebuild_runs_offline(world: dict[str, Path], tmp_path: Path, capsys) -> None:
    def args(out: Path, base_url: str) -> list[str]:
        return openai_judge_args(world, tmp_path, out, "--num-yes", "4", "--num-no", "4", "--llm-base-url", base_url)

    with FakeChatServer(lambda request: "No.") as server:
        assert main(args(tmp_path / "first.json", server.base_url)) == 0
    # The same build elsewhere, every judge answer cached, the endpoint gone: no request is needed, none is made.
    assert main(args(tmp_path / "again.json", server.base_url)) == 0
    assert (tmp_path / "again.json").read_text() == (tmp_path / "first.json").read_text()
    (tmp_path / "c.sqlite").unlink()  # nothing cached: the endpoint is checked before the build, as before
    code, err = run_cli(args(tmp_path / "third.json", "http://127.0.0.1:9/v1"), capsys)
    assert code == 2 and "unreachable after 1 attempts" in err and "Traceback" not in err
    assert not (tmp_path / "third.json").exists()


def test_no_half_written_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core import io as vio

    target = tmp_path / "out.json"
    target.write_text("[]")  # a previous, complete output

    def broken_dumps(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(vio.json, "dumps", broken_dumps)
    with pytest.raises(KeyboardInterrupt):
        vio.atomic_write_json(target, [1, 2, 3])
    assert target.read_text() == "[]" and list(tmp_path.iterdir()) == [target]


def test_judge_whose_answers_cannot_be_read_says_so_with_an_example(
    world: dict[str, Path], tmp_path: Path, capsys
) -> None:
    def unreadable(request: dict) -> str:
        if request["messages"][0]["content"] == PROBE_PROMPT:
            return "Yes."
        return "I would rather not say."

    with FakeChatServer(unreadable) as server:
        args = openai_judge_args(world, tmp_path, tmp_path / "o.json", "--llm-base-url", server.base_url)
        code, err = run_cli(args, capsys)
    assert code == 2, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "no judge answer could be read" in line and "e.g. 'I would rather not say.'" in line, line
    assert "predictable from its context" not in line


@pytest.mark.parametrize("fmt", ["parquet", "disk"])
def test_also_save_writes_a_datasets_copy_that_trains_without_image_root(
    world: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    from finetune.oric_data import get_oric_dataset

    items = build(world, tmp_path / "o" / "oric_train.json", "oric", "train", "--also-save", fmt)
    copy = tmp_path / "o" / "oric_train-hf"
    card = (copy / "README.md").read_text()
    assert "veritune build oric" in card and "oric_train.manifest.json" in card
    assert ("configs:" in card and (copy / "data" / "train.parquet").is_file()) == (fmt == "parquet")
    dataset, report = get_oric_dataset(copy, None)  # images embedded: no image_root
    assert report.kept == len(items) and [row["id"] for row in dataset] == [str(item["id"]) for item in items]
    assert dataset[0]["image"].size == Image.open(world["train_images"] / items[0]["image"]).size
