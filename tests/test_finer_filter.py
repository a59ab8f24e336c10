"""Negative filtering (FINER App. B.3): a discriminator's five-way MCQ, entropy thresholds per level,
regeneration through the LLM, dropping without one, resuming from the log, and a real tiny VLM."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeChatServer
from PIL import Image
from test_finer_builder import GRAPH

from core.llm_client import ChatClient
from data_builders.finer import prompts
from data_builders.finer.filtering import LETTERS, ChoiceDiscriminator, choice_entropy, filter_negatives, mcq_prompt
from data_builders.finer.scene_graph import parse_scene_graph
from veritune.cli import main


class ScriptedDiscriminator:
    """Gives probability ``mass[word]`` to the option that contains ``word`` and spreads the rest evenly."""

    name = "scripted"

    def __init__(self, mass: dict[str, float]) -> None:
        self.mass = mass
        self.calls: list[list[str]] = []

    def probabilities(self, image_path: Path, question: str, options: list[str]) -> list[float]:
        assert image_path.is_file()
        self.calls.append(list(options))
        hit = next(((i, m) for i, o in enumerate(options) for w, m in self.mass.items() if w in o.split()), None)
        if hit is None:
            return [1 / len(options)] * len(options)
        index, mass = hit
        return [mass if i == index else (1 - mass) / (len(options) - 1) for i in range(len(options))]


@pytest.fixture()
def scene(tmp_path: Path) -> tuple[list[Any], Path]:
    Image.new("RGB", (20, 20)).save(tmp_path / "dog.jpg")
    return [parse_scene_graph(copy.deepcopy(GRAPH), "g")], tmp_path


def test_entropy_is_natural_log_shannon() -> None:
    assert choice_entropy([0.2] * 5) == pytest.approx(math.log(5))
    assert choice_entropy([0.99, 0.0025, 0.0025, 0.0025, 0.0025]) == pytest.approx(
        -(0.99 * math.log(0.99) + 4 * 0.0025 * math.log(0.0025))
    )


def test_mcq_lists_five_lettered_options() -> None:
    text = mcq_prompt("Which of these objects can be seen in this image?", ["dog", "cat", "fox", "wolf", "sheep"])
    assert text.splitlines()[1:6] == [
        f"({letter}) {name}" for letter, name in zip(LETTERS, ["dog", "cat", "fox", "wolf", "sheep"])
    ]


def test_confident_wrong_choice_is_dropped_without_an_llm(scene: tuple[list[Any], Path]) -> None:
    graphs, root = scene
    stats = filter_negatives(graphs, root, ScriptedDiscriminator({"fox": 0.99}))
    assert graphs[0].objects[0].negatives == ["cat", "wolf", "sheep"]
    summary = stats.summary()
    assert (
        summary["obj"]["checked"] == 2 and summary["obj"]["flagged_low_entropy"] == 1 and summary["obj"]["dropped"] == 1
    )
    assert (summary["attr"]["checked"], summary["rel"]["checked"]) == (3, 1)


def test_uncertain_wrong_choice_is_kept(scene: tuple[list[Any], Path]) -> None:
    graphs, root = scene
    stats = filter_negatives(graphs, root, ScriptedDiscriminator({"fox": 0.4}))  # H ≈ 1.50 > θ_obj = 0.8
    assert graphs[0].objects[0].negatives == ["cat", "fox", "wolf", "sheep"]
    assert stats.summary()["obj"]["misclassified"] == 1 and stats.summary()["obj"]["flagged_low_entropy"] == 0


def test_threshold_is_per_level(scene: tuple[list[Any], Path]) -> None:
    graphs, root = scene
    discriminator = ScriptedDiscriminator({"chewing": 0.6})  # relation level: H ≈ 1.23
    filter_negatives(graphs, root, discriminator, thresholds={"rel": 1.3})
    assert graphs[0].objects[0].relations[0].negatives == [
        "is jumping over the",
        "is hiding under the",
        "is standing behind the",
    ]


def test_flagged_negative_is_regenerated_by_the_llm_and_checked_again(
    scene: tuple[list[Any], Path], tmp_path: Path
) -> None:
    graphs, root = scene
    discriminator = ScriptedDiscriminator({"fox": 0.99})
    with FakeChatServer(lambda body: "PHRASE=hamster") as server:
        client = ChatClient(server.base_url, "phi-4", cache_path=tmp_path / "c.sqlite", max_retries=0)
        stats = filter_negatives(graphs, root, discriminator, client=client)
        request = server.requests[0]
    assert graphs[0].objects[0].negatives == ["cat", "hamster", "wolf", "sheep"]  # same position
    assert request["messages"][0]["content"] == prompts.NEGATIVE_PROPOSAL.system
    assert (
        request["messages"][1]["content"]
        == "LEVEL=object\nPOSITIVE=dog\nNEGATIVES IN USE=cat; wolf; sheep\nREJECTED=fox"
    )
    assert stats.summary()["obj"]["regenerated"] == 1 and stats.summary()["obj"]["checked"] == 3  # 2 + the re-check
    assert sorted(discriminator.calls[-1]) == ["cat", "dog", "hamster", "sheep", "wolf"]


def test_proposal_still_visible_in_the_last_round_is_dropped(scene: tuple[list[Any], Path], tmp_path: Path) -> None:
    graphs, root = scene
    with FakeChatServer(lambda body: "PHRASE=hamster") as server:
        client = ChatClient(server.base_url, "phi-4", cache_path=tmp_path / "c.sqlite", max_retries=0)
        stats = filter_negatives(
            graphs, root, ScriptedDiscriminator({"fox": 0.99, "hamster": 0.99}), client=client, rounds=2
        )
    assert graphs[0].objects[0].negatives == ["cat", "wolf", "sheep"]
    assert (stats.summary()["obj"]["regenerated"], stats.summary()["obj"]["dropped"]) == (1, 1)


def test_log_lets_a_rerun_skip_the_model(scene: tuple[list[Any], Path], tmp_path: Path) -> None:
    graphs, root = scene
    log = tmp_path / "filter_log.jsonl"
    filter_negatives(graphs, root, ScriptedDiscriminator({"fox": 0.4}), log_path=log)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert (
        len(entries) == 6
        and next(e for e in entries if e["level"] == "obj" and e["positive"] == "dog")["predicted"] == "fox"
    )
    again = ScriptedDiscriminator({"fox": 0.4})
    filter_negatives([parse_scene_graph(copy.deepcopy(GRAPH), "g")], root, again, log_path=log)
    assert again.calls == []


# ---- a real (tiny, random) VLM


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from miniature.tiny.models import build_tiny_model

    return build_tiny_model("qwen3vl", tmp_path_factory.mktemp("tiny-filter"), seed=0, format_warmup_steps=0)


def test_tiny_vlm_gives_a_distribution_over_the_five_letters(tiny_vlm: Path, scene: tuple[list[Any], Path]) -> None:
    _, root = scene
    p = ChoiceDiscriminator(tiny_vlm, device="cpu").probabilities(
        root / "dog.jpg", "Which?", ["dog", "cat", "fox", "wolf", "sheep"]
    )
    assert len(p) == 5 and sum(p) == pytest.approx(1.0) and all(0 < x < 1 for x in p)
    assert 0 < choice_entropy(p) <= math.log(5)


def test_cli_filters_before_building(tiny_vlm: Path, scene: tuple[list[Any], Path], tmp_path: Path) -> None:
    _, root = scene
    (tmp_path / "g.json").write_text(json.dumps([GRAPH]))
    assert (
        main(
            [
                "build",
                "finer",
                "--scene-graphs",
                str(tmp_path / "g.json"),
                "--image-root",
                str(root),
                "--out",
                str(tmp_path / "out"),
                "--filter-model",
                str(tiny_vlm),
                "--filter-device",
                "cpu",
                "--theta-obj",
                "2",
                "--theta-attr",
                "2",
                "--theta-rel",
                "2",
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    levels = manifest["filter"]["levels"]
    # θ = 2 > log 5: every misclassification is flagged, and dropped (no LLM given).
    assert {level: levels[level]["checked"] for level in levels} == {"obj": 2, "attr": 3, "rel": 1}
    assert all(levels[level]["dropped"] == levels[level]["misclassified"] for level in levels)
    filtered = json.loads((tmp_path / "out" / "scene_graphs.filtered.json").read_text())
    kept = sum(len(o["neg_object"]) for o in filtered[0]["objects"])
    assert kept == 8 - levels["obj"]["dropped"]
    assert len((tmp_path / "out" / "filter_log.jsonl").read_text().splitlines()) == 6


def test_filtering_captions_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.jsonl").write_text(json.dumps({"image": "a.jpg", "caption": "A dog."}) + "\n")
    with pytest.raises(SystemExit):
        main(
            [
                "build",
                "finer",
                "--captions",
                str(tmp_path / "c.jsonl"),
                "--image-root",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
                "--filter-model",
                "x",
                "--llm-base-url",
                "http://127.0.0.1:9/v1",
                "--llm-model",
                "m",
            ]
        )
    assert capsys.readouterr().err.startswith(
        "error: --filter-model: negative filtering needs four negatives per entity"
    )
