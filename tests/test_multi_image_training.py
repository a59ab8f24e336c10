"""Training on several images per prompt: GRPO on ORIC questions mixed with multi-image questions in MIOH's
format ("Fine-Grained Multi-Image Object Hallucination Benchmark", Sec. 3, Table 1 and Fig. 2), rewarded by the
option grader the MIOH scorer uses, and DPO on multi-image pairs, both through the entry scripts on the tiny
Qwen3-VL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import log_history, run_entry
from PIL import Image

from core.errors import UserError
from core.images import image_budget
from eval_hooks.mcq import grade_letters
from eval_hooks.registry import get_benchmark
from finetune.oric_data import get_oric_dataset, prompt_length
from finetune.preference_data import load_images
from rewards import get_reward_funcs
from rewards.options import option_accuracy_reward, plain_option_accuracy_reward

GRPO_RECIPE = "recipes/miniature/tiny_oric_demo.yaml"
DPO_RECIPE = "recipes/miniature/tiny_finer_demo.yaml"
OPTIONS = {"A": "cat", "B": "umbrella", "C": "apple", "D": "None of the above"}


def write_mioh_fixture(path: Path, images: Path, count: int = 6, per_question: int = 2) -> Path:
    """``count`` MIOH-format questions over ``per_question`` of the ORIC fixture's images (names relative to
    ``images``), answers cycling through the letters."""
    names = sorted(p.name for p in images.iterdir())
    records = [
        {
            "id": f"q{index}",
            "images": [names[(index + k) % len(names)] for k in range(per_question)],
            "question": "Which object appears in all images?",
            "options": OPTIONS,
            "answer": "ABCD"[index % 4],
            "task": "existence",
            "pattern": "comprehensive",
            "pressure": "easy",
        }
        for index in range(count)
    ]
    path.write_text(json.dumps(records))
    return path


# ---- the option reward


def test_option_reward_scores_letters_as_the_mioh_scorer_does(tmp_path: Path, oric_fixture: tuple[Path, Path]) -> None:
    mioh = write_mioh_fixture(tmp_path / "mioh.json", oric_fixture[1], count=8)
    items = get_benchmark("mioh").load(mioh, oric_fixture[1])
    answers = ["A", "(b)", "The answer is C", "umbrella", "I cannot tell", "D. None of the above", "B", "apple"]
    correct, _ = grade_letters(items, {item.id: answer for item, answer in zip(items, answers, strict=True)})
    truths = [item.meta["answer"] for item in items]
    options = [json.dumps(item.meta["options"]) for item in items]
    expected = [1.0 if correct[item.id] else 0.0 for item in items]
    assert expected == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert plain_option_accuracy_reward(answers, truths, options) == expected
    tagged = [
        [{"role": "assistant", "content": f"<REASONING>look</REASONING><SOLUTION>{a}</SOLUTION>"}] for a in answers
    ]
    assert option_accuracy_reward(tagged, truths, options) == expected
    # R1: no <SOLUTION> block, or two, is no answer; a yes/no row (no options) is left to the yes/no reward
    assert option_accuracy_reward(["A", "<SOLUTION>A</SOLUTION><SOLUTION>A</SOLUTION>"], ["A", "A"], options[:2]) == [
        0.0,
        0.0,
    ]
    assert option_accuracy_reward(["<SOLUTION>yes</SOLUTION>"], ["yes"], [""]) == [None]
    accuracy, option_accuracy = get_reward_funcs(["accuracy", "option_accuracy"])
    assert accuracy(["<SOLUTION>B</SOLUTION>"], ["B"]) == [None]  # a letter is no yes/no label
    assert option_accuracy is option_accuracy_reward


# ---- GRPO data: the mix, the per-image budget, over-long prompts


def test_multi_image_questions_are_mixed_at_the_ratio_with_a_per_image_budget(
    tmp_path: Path, oric_fixture: tuple[Path, Path]
) -> None:
    mioh = write_mioh_fixture(tmp_path / "mioh.json", oric_fixture[1], count=6, per_question=3)
    dataset, report = get_oric_dataset(
        *oric_fixture,
        max_pixels=4096,
        multi_image_path=mioh,
        multi_image_root=oric_fixture[1],
        multi_image_ratio=0.5,
        max_pixels_per_image=1024,
    )
    assert len(dataset) == 12 and report.multi_image == 4 and "4 of them multi-image questions" in report.summary()
    rows = list(dataset)
    single = [r for r in rows if not r["options"]]
    multi = [r for r in rows if r["options"]]
    assert len(single) == 8 and len(multi) == 4
    assert all(len(r["images"]) == 1 and r["images"][0].width * r["images"][0].height <= 4096 for r in single)
    assert all(len(r["images"]) == 3 and all(i.width * i.height <= 1024 for i in r["images"]) for r in multi)
    assert all(r["solution"] in OPTIONS for r in multi) and all(r["solution"] in ("yes", "no") for r in single)
    text = multi[0]["prompt"][0]["content"]
    assert text.startswith("The images above are, in order, Image 1, Image 2, Image 3.")  # MIOH's prompt
    assert "(put the option's letter here)" in text  # the R1 instruction, asking for a letter
    assert image_budget(3, 4096) == 1365  # without max_pixels_per_image the budget is shared


def test_an_n_image_prompt_over_max_prompt_length_is_dropped_and_counted(
    tmp_path: Path, oric_fixture: tuple[Path, Path], tiny_qwen3vl: Path
) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    # six images a question: at the tiny processor's 4,096 pixels each they cost 4 tokens, at 1,024 one
    six = write_mioh_fixture(tmp_path / "six.json", oric_fixture[1], count=4, per_question=6)
    multi = {"multi_image_path": six, "multi_image_root": oric_fixture[1], "multi_image_ratio": 0.5}

    def lengths(per_image: int) -> dict[str, int]:
        rows, _ = get_oric_dataset(
            *oric_fixture, max_pixels=4096, max_prompt_length=None, max_pixels_per_image=per_image, **multi
        )
        return {r["id"]: prompt_length(processor, r["prompt"], r["images"]) for r in rows}

    small, full = lengths(1024), lengths(4096)
    limit = max(small.values())
    assert min(n for key, n in full.items() if key.startswith("multi/")) > limit

    def within_limit(per_image: int) -> tuple[Any, Any]:
        return get_oric_dataset(
            *oric_fixture,
            processor=processor,
            max_pixels=4096,
            max_prompt_length=limit,
            max_pixels_per_image=per_image,
            **multi,
        )

    dataset, report = within_limit(4096)
    assert report.dropped_too_long == 4 and len(dataset) == 8 and not any(r["options"] for r in dataset)
    assert "8/12 examples kept (4 of them multi-image questions)" in report.summary()
    assert "4 dropped as longer than max_prompt_length" in report.summary()
    # the per-image budget makes the same questions fit, whole: all their image tokens are in the prompt
    dataset, report = within_limit(1024)
    assert report.dropped_too_long == 0 and len(dataset) == 12
    kept = {r["id"]: prompt_length(processor, r["prompt"], r["images"]) for r in dataset}
    assert kept == small


def test_multi_image_questions_fewer_than_the_ratio_asks_are_refused(
    tmp_path: Path, oric_fixture: tuple[Path, Path]
) -> None:
    mioh = write_mioh_fixture(tmp_path / "mioh.json", oric_fixture[1], count=3)
    with pytest.raises(UserError, match="3 questions, fewer than the 8 multi_image_ratio asks for"):
        get_oric_dataset(*oric_fixture, multi_image_path=mioh)
    (tmp_path / "bad.json").write_text(json.dumps([{"id": "x", "images": ["a.jpg"]}]))
    with pytest.raises(UserError, match=r"multi_image_path: .*bad.json: row 0: missing field 'question'"):
        get_oric_dataset(*oric_fixture, multi_image_path=tmp_path / "bad.json")


# ---- through the entry scripts


def train_one_step(
    script: str, recipe: str, model: Path, out: Path, *flags: Any
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One training step of the entry ``script`` on ``recipe``, ``model`` and ``flags`` into ``out`` (W&B off, the
    step saved): its result, which must succeed, and the step's logged row."""
    result = run_entry(
        script,
        recipe,
        "--model_name_or_path",
        model,
        *flags,
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--output_dir",
        out,
        WANDB_MODE="disabled",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (step,) = [row for row in log_history(out) if "loss" in row]
    return result, step


def test_grpo_trains_a_step_on_oric_mixed_with_multi_image_questions(
    tmp_path: Path, oric_fixture: tuple[Path, Path], tiny_qwen3vl: Path
) -> None:
    mioh = write_mioh_fixture(tmp_path / "mioh.json", oric_fixture[1], count=4, per_question=2)
    result, step = train_one_step(
        "grpo.py",
        GRPO_RECIPE,
        tiny_qwen3vl,
        tmp_path / "run",
        "--dataset_path",
        oric_fixture[0],
        "--image_root",
        oric_fixture[1],
        "--multi_image_path",
        mioh,
        "--multi_image_root",
        oric_fixture[1],
        "--multi_image_ratio",
        "0.5",
        "--max_pixels_per_image",
        "1024",
        "--reward_funcs",
        "accuracy",
        "option_accuracy",
        "format",
        "--reward_weights",
        "1.0",
        "1.0",
        "1.0",
    )
    assert "12/12 examples kept (4 of them multi-image questions)" in result.stderr
    assert {"rewards/accuracy_reward/mean", "rewards/option_accuracy_reward/mean"} <= step.keys()


def multi_image_pair(index: int) -> dict[str, Any]:
    first, second = f"{index % 6}.jpg", f"{(index + 1) % 6}.jpg"
    return {
        "images": [first, second],
        "prompt": [{"role": "user", "content": "Which object appears in both images? A. cat B. dog"}],
        "chosen": [{"role": "assistant", "content": "A" if index % 2 else "B"}],
        "rejected": [{"role": "assistant", "content": "B" if index % 2 else "A"}],
    }


def test_dpo_trains_a_step_on_multi_image_pairs(tmp_path: Path, tiny_qwen3vl: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for index in range(6):
        Image.new("RGB", (64, 48), (index * 40, 90, 160)).save(images / f"{index}.jpg")
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(multi_image_pair(i)) + "\n" for i in range(8)))
    assert [im.size for im in load_images([str(images / "0.jpg")] * 2, 4096, 768)] == [(32, 24)] * 2
    _, step = train_one_step(
        "dpo.py",
        DPO_RECIPE,
        tiny_qwen3vl,
        tmp_path / "run",
        "--dataset_path",
        data,
        "--image_root",
        images,
        "--max_pixels_per_image",
        "768",
    )
    assert "rewards/margins" in step
