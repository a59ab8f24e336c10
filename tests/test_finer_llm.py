"""FINER-Tuning LLM path against a real loopback chat-completions server with canned answers: the exact
tuples, malformed answers rejected and retried, skips counted, and a rerun that sends no request."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeChatServer
from PIL import Image

from core.errors import UserError
from core.llm_client import PROBE_PROMPT, ChatClient
from data_builders.finer import phrases, prompts
from data_builders.finer.build import build_finer_from_captions
from data_builders.finer.llm import Caption
from data_builders.finer.phrases import Rejected
from veritune.cli import main

CAPTION = (
    "A brown dog with a red collar is lying on a striped rug in a bright living room. "
    "A small white cat sits next to the dog and looks at the window."
)
BLURRY = "A blurry photo with nothing recognisable in it."
OBJECTS = ["a dog", "a rug", "a cat"]
ATTR_UNITS = {1: "a black dog with a red collar", 2: "a brown dog with a blue collar"}
REL_NEGATIVES = {
    1: "The dog is jumping over a striped rug and is next to a small white cat",
    2: "The dog is lying on a striped rug and is far away from a small white cat",
}
WH_A = ("What is lying on a striped rug?", "a brown dog with a red collar")
WH_B = ("What is the brown dog with a red collar lying on?", "a striped rug")
WH_NEGATIVE = {
    WH_A[0]: "Q=What is lying on a plain rug? || A=The rug is not plain, but it is striped.",
    WH_B[0]: (
        "Q=What is the brown dog with a blue collar lying on? "
        "|| A=The dog does not have a blue collar, but it has a red collar."
    ),
}


def _last_user(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def responder(body: dict[str, Any]) -> str:
    """Canned answers by task; the first OBJ extraction, OBJ negative and ATTR negative are malformed."""
    if body["messages"][0]["content"] == PROBE_PROMPT:  # the CLI's check of the endpoint before it builds
        return "Yes."
    system, user = body["messages"][0]["content"], _last_user(body)
    retry = user.startswith("That answer was rejected")
    first_user = body["messages"][1]["content"]
    if BLURRY in first_user:
        return "SENTENCE=SKIP" if system == prompts.WH_SENTENCE.system else "PHRASE=NONE"
    if system == prompts.OBJ_EXTRACT.system:
        return "PHRASE=a dog, a rug and a cat" if retry else "Objects: dog, rug, cat"
    if system == prompts.ATTR_EXTRACT.system:
        return "PHRASE=a brown dog with a red collar"
    if system == prompts.REL_EXTRACT.system:
        return "PHRASE=The dog is lying on a striped rug and is next to a small white cat"
    if system == prompts.WH_SENTENCE.system:
        return "SENTENCE=a brown dog with a red collar is lying on a striped rug"
    if system == prompts.OBJ_NEGATIVE.system:
        k = int(re.search(r"REPLACE_INDEX=(\d+)", first_user)[1])
        units = list(OBJECTS)
        units[k - 1] = "a horse"
        if not retry:
            units[k % 3] = "a fish"  # two objects replaced: must be rejected
        return "PHRASE=" + ", ".join(units[:-1]) + " and " + units[-1]
    if system == prompts.ATTR_NEGATIVE.system:
        k = int(re.search(r"ATTRIBUTE_INDEX=(\d+)", first_user)[1])
        return f"PHRASE={ATTR_UNITS[k]}" if retry else "PHRASE=a brown cat with a red collar"  # head changed first
    if system == prompts.REL_NEGATIVE.system:
        return "PHRASE=" + REL_NEGATIVES[int(re.search(r"CLAUSE_INDEX=(\d+)", first_user)[1])]
    if system == prompts.WH_QA_A.system:
        return f"Q={WH_A[0]} || A={WH_A[1]}"
    if system == prompts.WH_QA_B.system:
        return f"Q={WH_B[0]} || A={WH_B[1]}"
    if system == prompts.WH_NEGATIVE.system:
        return WH_NEGATIVE[first_user.removeprefix("Question:\n")]
    raise AssertionError(f"unexpected request: {system[:60]!r}")


def write_captions(root: Path) -> tuple[Path, Path]:
    images = root / "images"
    images.mkdir(parents=True)
    for name in ("dog.jpg", "blur.jpg"):
        Image.new("RGB", (16, 16)).save(images / name)
    lines = [
        {"image": "dog.jpg", "caption": CAPTION},
        {"image": "blur.jpg", "caption": BLURRY},
        {"image": "gone.jpg", "caption": CAPTION},
    ]
    path = root / "captions.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path, images


def client(server: FakeChatServer, cache: Path) -> ChatClient:
    return ChatClient(
        server.base_url, "phi-4", cache_path=cache, api_key_env="VERITUNE_TEST_NO_KEY", concurrency=4, max_retries=0
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("finer-llm")
    captions, images = write_captions(root)
    with FakeChatServer(responder) as server:
        manifest = build_finer_from_captions(
            captions, images, root / "out", client(server, root / "cache.sqlite"), seed=0, validation_ratio=0
        )
        requests = list(server.requests)
        base_url = server.base_url
    rows = [json.loads(line) for line in (root / "out" / "train.jsonl").read_text().splitlines()]
    return {
        "root": root,
        "captions": captions,
        "images": images,
        "manifest": manifest,
        "requests": requests,
        "rows": rows,
        "base_url": base_url,
    }


def _texts(row: dict[str, Any]) -> tuple[str, str, str]:
    return (
        row["prompt"][0]["content"][1]["text"],
        row["chosen"][0]["content"][0]["text"],
        row["rejected"][0]["content"][0]["text"],
    )


def test_caption_yields_the_expected_eight_tuples(built: dict[str, Any]) -> None:
    rng = Caption(1, "dog.jpg", CAPTION).rng(0)  # the same draws as the builder: k for OBJ, ATTR, REL, then the WH mode
    k_obj, k_attr, k_rel = rng.randint(1, 3), rng.randint(1, 2), rng.randint(1, 2)
    question_pos, answer_pos = WH_A if rng.choice(("A", "B")) == "A" else WH_B
    negative_objects = list(OBJECTS)
    negative_objects[k_obj - 1] = "a horse"
    expected_phrases = {
        "obj": ("a dog, a rug and a cat", ", ".join(negative_objects[:2]) + " and " + negative_objects[2]),
        "attr": ("a brown dog with a red collar", ATTR_UNITS[k_attr]),
        "rel": (
            "the dog that is lying on a striped rug and is next to a small white cat",
            "the dog that " + REL_NEGATIVES[k_rel].removeprefix("The dog "),
        ),
    }
    rows = {(r["subset"], r["polarity"]): r for r in built["rows"] if r["images"] == ["dog.jpg"]}
    assert len(rows) == 8
    for subset, (psi_plus, psi_minus) in expected_phrases.items():
        question, chosen, rejected = _texts(rows[(subset, "pos")])
        assert psi_plus in question and psi_plus in chosen and psi_minus in rejected and chosen.startswith("Yes")
        question, chosen, rejected = _texts(rows[(subset, "neg")])
        assert psi_minus in question and psi_plus in chosen and psi_minus in rejected and chosen.startswith("No, but")
    question_neg, answer_neg = WH_NEGATIVE[question_pos].removeprefix("Q=").split(" || A=")
    answer_pos = answer_pos[0].upper() + answer_pos[1:] + "."
    assert _texts(rows[("wh", "pos")]) == (question_pos, answer_pos, answer_neg)
    assert _texts(rows[("wh", "neg")]) == (question_neg, answer_neg, answer_pos)  # symmetrised


def test_malformed_answers_are_rejected_and_sent_back(built: dict[str, Any]) -> None:
    rejected = built["manifest"]["llm"]["rejected_answers"]
    assert rejected == {
        "attr_negative: the object changed from … to …": 1,
        "obj_extract: expected one line …": 1,
        "obj_negative: changed N objects, expected exactly one": 1,
    }
    retries = [r for r in built["requests"] if _last_user(r).startswith("That answer was rejected")]
    assert len(retries) == 3
    obj_retry = next(r for r in retries if r["messages"][0]["content"] == prompts.OBJ_EXTRACT.system)
    assert obj_retry["messages"][-2] == {"role": "assistant", "content": "Objects: dog, rug, cat"}
    assert "expected one line 'PHRASE=...'" in _last_user(obj_retry)


def test_request_counts_and_skips_are_recorded(built: dict[str, Any]) -> None:
    manifest = built["manifest"]
    # Round 1: 4 per usable caption + 1 retry; round 2: 4 + 2 retries; round 3: 1.
    assert len(built["requests"]) == manifest["llm"]["requests_sent"] == 16
    assert manifest["skipped"] == {
        "attr_positive_nothing_to_extract": 1,
        "caption_without_usable_object": 1,
        "missing_image": 1,
        "obj_positive_nothing_to_extract": 1,
        "rel_positive_nothing_to_extract": 1,
        "wh_sentence_nothing_to_extract": 1,
    }
    assert manifest["missing_images"] == ["gone.jpg"] and manifest["images"] == {"records": 3, "used": 2}
    assert manifest["counts"]["by_subset"] == {"attr": 2, "obj": 2, "rel": 2, "wh": 2}


def test_rerun_sends_no_request_and_writes_the_same_data(built: dict[str, Any], tmp_path: Path) -> None:
    # the same endpoint, its server gone: every answer comes from the cache
    again = ChatClient(built["base_url"], "phi-4", cache_path=built["root"] / "cache.sqlite", max_retries=0)
    build_finer_from_captions(built["captions"], built["images"], tmp_path / "out", again, seed=0, validation_ratio=0)
    assert again.requests_sent == 0 and again.cache_hits == 16
    assert (tmp_path / "out" / "train.jsonl").read_text() == (built["root"] / "out" / "train.jsonl").read_text()


def test_unit_still_bad_after_all_attempts_is_skipped_and_counted(tmp_path: Path) -> None:
    def stubborn(body: dict[str, Any]) -> str:
        if body["messages"][0]["content"] == prompts.REL_EXTRACT.system:
            return "PHRASE=The dog near the rug"  # no is/are clause, every time
        return responder(body)

    captions, images = write_captions(tmp_path)
    captions.write_text(json.dumps({"image": "dog.jpg", "caption": CAPTION}) + "\n")
    with FakeChatServer(stubborn) as server:
        manifest = build_finer_from_captions(
            captions, images, tmp_path / "out", client(server, tmp_path / "c.sqlite"), attempts=2
        )
        rel_requests = [r for r in server.requests if r["messages"][0]["content"] == prompts.REL_EXTRACT.system]
    assert len(rel_requests) == 2
    assert manifest["skipped"] == {"rel_positive_rejected_after_retries": 1}
    assert manifest["counts"]["by_subset"] == {"attr": 2, "obj": 2, "wh": 2}


def test_caption_line_that_is_not_json_is_an_error_with_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    captions, images = write_captions(tmp_path)
    captions.write_text(captions.read_text() + "{not json\n")
    with FakeChatServer(responder) as server:
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "build",
                    "finer",
                    "--captions",
                    str(captions),
                    "--image-root",
                    str(images),
                    "--out",
                    str(tmp_path / "out"),
                    "--llm-base-url",
                    server.base_url,
                    "--llm-model",
                    "phi-4",
                    "--llm-cache",
                    str(tmp_path / "c.sqlite"),
                ]
            )
        assert server.requests == []  # checked before any request is sent
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {captions}, line 4: not valid JSON")


def test_caption_line_without_caption_key_is_an_error(tmp_path: Path) -> None:
    captions, images = write_captions(tmp_path)
    captions.write_text(json.dumps({"image": "dog.jpg", "text": CAPTION}) + "\n")
    with pytest.raises(UserError, match=r"captions.jsonl, line 1: 'caption' is missing or not a string"):
        build_finer_from_captions(captions, images, tmp_path / "out", client=None)


def test_cli_llm_path_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    captions, images = write_captions(tmp_path)
    with FakeChatServer(responder) as server:
        code = main(
            [
                "build",
                "finer",
                "--captions",
                str(captions),
                "--image-root",
                str(images),
                "--out",
                str(tmp_path / "out"),
                "--llm-base-url",
                server.base_url,
                "--llm-model",
                "phi-4",
                "--llm-cache",
                str(tmp_path / "c.sqlite"),
                "--llm-api-key-env",
                "VERITUNE_TEST_NO_KEY",
            ]
        )
    assert code == 0 and "7 train + 1 validation tuples" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["llm"]["model"] == "phi-4" and manifest["counts"]["written"] == 8
    assert manifest["counts"]["train"] + manifest["counts"]["validation"] == 8


# ---- the answer checks on their own


def test_object_negative_must_replace_exactly_the_asked_object() -> None:
    positive = ["a dog", "a rug", "a cat"]
    assert phrases.check_object_negative(positive, "a dog, a horse and a cat", 2, CAPTION) == [
        "a dog",
        "a horse",
        "a cat",
    ]
    for phrase, reason in [
        ("a dog, a horse", "has 2 objects, expected 3"),
        ("a horse, a rug and a cat", "changed object 1, expected object 2"),
        ("a dog, a rug and a cat", "no object was changed"),
        ("a dog, a window and a cat", "the new object 'a window' appears in the caption"),
        ("a fox, a horse and a cat", "changed 2 objects, expected exactly one"),
        ("a dog, a cat and a cat", "the new object duplicates another object"),
    ]:
        with pytest.raises(Rejected, match=re.escape(reason)):
            phrases.check_object_negative(positive, phrase, 2, CAPTION)


def test_attribute_units_are_the_adjective_group_and_each_clause() -> None:
    parsed = phrases.parse_attribute_phrase(
        "a fluffy white dog with a red collar, with floppy ears, and wearing a tiny hat"
    )
    assert (parsed.determiner, parsed.head, parsed.units) == (
        "a",
        "dog",
        ["fluffy white", "with a red collar", "with floppy ears", "wearing a tiny hat"],
    )
    edited = phrases.check_attribute_negative(
        parsed, "a fluffy white dog with a red collar, with pointed ears, and wearing a tiny hat", 3
    )
    assert edited.units[2] == "with pointed ears"
    with pytest.raises(Rejected, match="changed attribute 3, expected attribute 1"):
        phrases.check_attribute_negative(
            parsed, "a fluffy white dog with a red collar, with pointed ears, and wearing a tiny hat", 1
        )


def test_attribute_with_and_inside_a_clause_is_one_unit() -> None:
    parsed = phrases.parse_attribute_phrase("a cat with black and white stripes and with green eyes")
    assert parsed.units == ["with black and white stripes", "with green eyes"]


def test_relation_negative_keeps_the_head_and_does_not_just_insert_not() -> None:
    positive = phrases.parse_relation_phrase("The dog is lying on a rug, is next to a cat and is looking at the window")
    assert positive.clauses == ("is lying on a rug", "is next to a cat", "is looking at the window")
    assert positive.noun_phrase() == "the dog that is lying on a rug, is next to a cat and is looking at the window"
    with pytest.raises(Rejected, match="the head changed"):
        phrases.check_relation_negative(
            positive, "The puppy is lying on a rug, is next to a cat and is looking at the window", 1
        )
    with pytest.raises(Rejected, match="inserting 'not'"):
        phrases.check_relation_negative(
            positive, "The dog is lying on a rug, is not next to a cat and is looking at the window", 2
        )


def test_wh_answers_are_checked_against_the_sentence_and_the_question() -> None:
    sentence = "a brown dog with a red collar is lying on a striped rug"
    assert phrases.check_wh_answer(WH_A, sentence) == WH_A
    with pytest.raises(Rejected, match="not an exact span"):
        phrases.check_wh_answer(("What is lying on a striped rug?", "a happy dog"), sentence)
    with pytest.raises(Rejected, match="deny the new attribute and restore the original"):
        phrases.check_wh_negative(("What is lying on a plain rug?", "The rug is not what you think."), WH_A[0])
    with pytest.raises(Rejected, match="question word changed"):
        phrases.check_wh_negative(("Where is the plain rug?", "The rug is not plain, but it is striped."), WH_A[0])


def test_line_format_is_strict() -> None:
    assert phrases.tagged("PHRASE=a dog and a cat.", "PHRASE") == "a dog and a cat"
    assert phrases.tagged("PHRASE=NONE", "PHRASE") is None
    for answer in ("a dog and a cat", "PHRASE=a dog\nPHRASE=a cat", "SENTENCE=a dog", ""):
        with pytest.raises(Rejected):
            phrases.tagged(answer, "PHRASE")
