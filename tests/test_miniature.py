"""The miniature ORIC / FINER experiment's pieces: conventional warm-start data (miniature/warmstart_data.py), the
SFT entry point on its table, the trained tiny CLIP, the eval hook's step-0 baseline and the report's before/after
section."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import run_entry

from miniature.warmstart_data import caption, conventional_examples
from miniature.world import build_synthetic_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_synthetic_world(tmp_path_factory.mktemp("world"), num_train_images=24, num_val_images=12, seed=5)


def _present(annotations: Path) -> dict[str, set[str]]:
    data = json.loads(annotations.read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    files = {i["id"]: i["file_name"] for i in data["images"]}
    present: dict[str, set[str]] = {name: set() for name in files.values()}
    for a in data["annotations"]:
        present[files[a["image_id"]]].add(names[a["category_id"]])
    return present


QUESTION = re.compile(r"(?:there|contain|noticed|see) an? (.+?)(?: in the image)?\?")


def _asked(prompt: str) -> str:
    match = QUESTION.search(prompt)
    assert match, prompt
    return match.group(1)


def _resolved(world: dict[str, Path], examples: list[dict]) -> list[dict]:
    """The examples with their images as finetune/sft.py resolves a table's (under ``image_root``)."""
    return [{**e, "images": [str(world["train_images"] / name) for name in e["images"]]} for e in examples]


def _examples(world: dict[str, Path], per_image: int, *, captions: bool, styles: list[str], seed: int) -> list[dict]:
    """The warm-start's examples of the test world's train split, their images resolved."""
    examples = conventional_examples(
        world["train_annotations"],
        world["train_images"],
        questions_per_image=per_image,
        captions=captions,
        styles=styles,
        seed=seed,
    )
    return _resolved(world, examples)


def _table(world: dict[str, Path], out: Path) -> Path:
    """The demo warm-start's table of the test world's train split (`veritune build warmstart-data`)."""
    from miniature.stages import WARMSTART_DATA_FLAGS
    from veritune.cli import main

    command = ["build", "warmstart-data", "--annotations", str(world["train_annotations"]), "--out", str(out)]
    assert main([*command, "--image-root", str(world["train_images"]), *WARMSTART_DATA_FLAGS]) == 0
    return out


def test_conventional_data_is_true_of_every_image(world: dict[str, Path]) -> None:
    """Answers are never flipped: captions list exactly an image's classes, yes questions ask about one of
    them and no questions about another class; both answer styles, one image per example."""
    examples = _examples(world, 2, captions=True, styles=["plain", "r1"], seed=0)
    groups: dict[str, list[dict]] = {}
    for example in examples:  # one image per example, by its path (decoded when a batch is collated)
        assert len(example["images"]) == 1
        groups.setdefault(example["images"][0], []).append(example)
    assert len(groups) == 24
    captions = []
    for group in groups.values():
        (described,) = [
            e["completion"][0]["content"] for e in group if e["prompt"][0]["content"].startswith("Describe")
        ]
        shown = set(re.findall(r"an? ([a-z ]+?)(?:,| and |\.)", described.removeprefix("The image shows ")))
        captions.append(frozenset(shown))
        styles = {"plain": 0, "r1": 0}
        for example in group:
            prompt, completion = example["prompt"][0]["content"], example["completion"][0]["content"]
            if prompt.startswith("Describe"):
                continue
            style = "r1" if "<SOLUTION>" in completion else "plain"
            styles[style] += 1
            label = "yes" if completion in ("Yes.",) or "<SOLUTION> yes" in completion else "no"
            assert (_asked(prompt) in shown) == (label == "yes"), (prompt, completion, shown)
        assert styles == {"plain": 4, "r1": 4}
    assert sorted(captions, key=sorted) == sorted(
        (frozenset(p) for p in _present(world["train_annotations"]).values()), key=sorted
    )
    assert caption(["cup", "apple", "oven"]) == "The image shows a cup, an apple and an oven."


def test_no_questions_are_drawn_uniformly_from_absent_classes(world: dict[str, Path]) -> None:
    """POPE-random-style negatives: over many draws every absent class is asked about, in-context or not."""
    examples = _examples(world, 2, captions=False, styles=["plain"], seed=1)
    asked_no = {_asked(e["prompt"][0]["content"]) for e in examples if e["completion"][0]["content"] == "No."}
    assert len(asked_no) >= 8  # most of the 12 classes appear as negatives somewhere


def test_mcq_items_name_one_present_class_and_leave_the_rest_unchanged(world: dict[str, Path]) -> None:
    """``mcq_per_image``: one lettered question per image whose answer letter names a present class and
    whose four other options are absent classes; the yes/no examples are those drawn without it."""
    plain = _examples(world, 2, captions=False, styles=["plain"], seed=0)
    with_mcq = conventional_examples(
        world["train_annotations"],
        world["train_images"],
        questions_per_image=2,
        captions=False,
        styles=["plain"],
        seed=0,
        mcq_per_image=1,
    )
    with_mcq = _resolved(world, with_mcq)
    mcq = [e for e in with_mcq if "single capital letter" in e["prompt"][0]["content"]]
    assert len(mcq) == 24 and len(with_mcq) == len(plain) + 24
    present = _present(world["train_annotations"])
    for example in mcq:
        lines = example["prompt"][0]["content"].splitlines()
        assert lines[0] == "Which of these objects can you see in the image?"
        assert lines[-1] == "Please answer with a single capital letter (A, B, C, D, or E)."
        options = {line[0]: line[3:].split(" ", 1)[1] for line in lines[1:-1]}
        shown = present[Path(example["images"][0]).name]
        assert [letter for letter, name in options.items() if name in shown] == [example["completion"][0]["content"]]
    first = str(world["train_images"] / json.loads(world["train_annotations"].read_text())["images"][0]["file_name"])
    of_first = [e for e in plain if e["images"] == [first]]  # drawn before any MCQ is
    assert of_first and all(e in with_mcq for e in of_first)


def test_sft_rows_hold_image_paths_decoded_to_rgb(world: dict[str, Path]) -> None:
    """The dataset stores each image's path, not re-encoded pixels, and decodes it to the RGB image the
    file holds when a row is read."""
    from datasets import Image as ImageFeature
    from datasets import List
    from PIL import Image

    from finetune.sft import examples_dataset

    examples = _examples(world, 1, captions=False, styles=["plain"], seed=0)
    dataset = examples_dataset(examples)
    stored = dataset.cast_column("images", List(ImageFeature(decode=False)))[0]["images"][0]
    assert stored == {"path": examples[0]["images"][0], "bytes": None}
    decoded = dataset[0]["images"][0]
    with Image.open(examples[0]["images"][0]) as opened:
        assert decoded.mode == "RGB" and list(decoded.getdata()) == list(opened.convert("RGB").getdata())


@pytest.mark.parametrize("family", ["tiny_qwen3vl", "tiny_qwen25vl"])
def test_position_ids_collator_gives_the_forward_the_ids_it_would_compute(
    world: dict[str, Path], family: str, request: pytest.FixtureRequest
) -> None:
    """The M-RoPE position ids computed while collating are the ones the forward computes itself: the same
    logits to the bit, in both Qwen-VL generations. A model without ``compute_3d_position_ids`` keeps the
    collator unchanged."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from finetune.sft import PositionIdsCollator, examples_dataset, with_position_ids

    examples = _examples(world, 1, captions=True, styles=["plain"], seed=0)
    rows = [examples_dataset(examples)[i] for i in range(4)]
    checkpoint = request.getfixturevalue(family)
    model = AutoModelForImageTextToText.from_pretrained(checkpoint).eval()
    processor = AutoProcessor.from_pretrained(checkpoint)
    collator = DataCollatorForVisionLanguageModeling(processor, completion_only_loss=True)
    wrapped = with_position_ids(collator, model)
    assert isinstance(wrapped, PositionIdsCollator)
    plain, with_ids = collator([dict(r) for r in rows]), wrapped([dict(r) for r in rows])
    assert "position_ids" not in plain and with_ids["position_ids"].shape[-1] == with_ids["input_ids"].shape[-1]
    assert with_ids["position_ids"].amax() < with_ids["input_ids"].shape[-1]  # image tokens share positions
    with torch.no_grad():
        assert torch.equal(model(**plain).logits, model(**with_ids).logits)
    assert with_position_ids(collator, torch.nn.Linear(2, 2)) is collator


def test_fused_lm_head_scores_only_labelled_positions_on_cpu(
    world: dict[str, Path], tiny_qwen3vl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the ``miniature.cpu_speed.compact_lm_head`` plugin (``set_cpu_compact_lm_head(True)``) TRL's fused LM
    head projects, on the CPU, only the positions that carry a label (the answer tokens), not every image and prompt
    token: the same loss, log-probabilities, entropies and LM-head gradient up to float rounding; ``False`` restores
    TRL's own head."""
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from finetune.sft import examples_dataset
    from miniature.cpu_speed import set_cpu_compact_lm_head

    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)  # undone after the test
    rows_scored: list[int] = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counting_apply(hidden: torch.Tensor, *args: object) -> object:
        rows_scored.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting_apply)
    examples = _examples(world, 1, captions=False, styles=["plain"], seed=0)
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    batch = DataCollatorForVisionLanguageModeling(processor, completion_only_loss=True)(
        [dict(examples_dataset(examples)[i]) for i in range(4)]
    )
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))

    def scored() -> tuple[object, torch.Tensor]:
        model.zero_grad()
        outputs = model(**batch, fused_lm_head=True)
        outputs.loss.backward()
        return outputs, model.get_output_embeddings().weight.grad.clone()

    set_cpu_compact_lm_head(False)
    every, every_grad = scored()
    set_cpu_compact_lm_head(True)
    set_cpu_compact_lm_head(True)  # idempotent
    labelled, labelled_grad = scored()
    set_cpu_compact_lm_head(False)  # TRL's own rule again
    scored()
    labels = batch["labels"][:, 1:]
    assert rows_scored == [labels.numel(), int((labels != -100).sum()), labels.numel()]
    assert rows_scored[1] < rows_scored[0] / 4  # the answers are a few tokens of each sequence
    torch.testing.assert_close(labelled.loss, every.loss)
    torch.testing.assert_close(labelled.log_probs, every.log_probs)
    torch.testing.assert_close(labelled.entropy, every.entropy)
    assert torch.equal(labelled.is_top1, every.is_top1)
    torch.testing.assert_close(labelled_grad, every_grad)


def test_sft_entry_point_trains_and_saves(world: dict[str, Path], tiny_qwen3vl: Path, tmp_path: Path) -> None:
    command = [
        "recipes/miniature/tiny_sft_warmstart.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        _table(world, tmp_path / "train.jsonl"),
        "--image_root",
        world["train_images"],
        "--output_dir",
        tmp_path / "sft",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
    ]
    result = run_entry("sft.py", *command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "sft" / "model.safetensors").is_file()
    state = json.loads((tmp_path / "sft" / "trainer_state.json").read_text())
    assert state["global_step"] == 2

    # the same command again (no resume_from_checkpoint): the finished run is reported, nothing is trained
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "sft").rglob("*") if path.is_file()}
    rerun = run_entry("sft.py", *command)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "already holds this run, finished at step 2 of 2: nothing to do" in rerun.stderr
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "sft").rglob("*") if path.is_file()} == before


def test_sft_given_an_annotation_file_names_the_table_builder_in_one_line(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    bad = tmp_path / "instances.json"
    bad.write_text(json.dumps({"images": []}))
    result = run_entry(
        "sft.py",
        "recipes/miniature/tiny_sft_warmstart.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        bad,
        "--image_root",
        tmp_path,
        "--output_dir",
        tmp_path / "out",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: dataset_path: {bad} is a COCO instances file, not a table of examples; build one with " in (
        result.stderr
    )
    assert f"`veritune build warmstart-data --annotations {bad} --image-root IMAGES" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before the run directory is claimed


def test_tiny_clip_learns_the_train_split(world: dict[str, Path], tmp_path: Path) -> None:
    from miniature.tiny.clip import build_tiny_clip, train_tiny_clip

    build_tiny_clip(tmp_path / "clip", seed=0)
    stats = train_tiny_clip(tmp_path / "clip", world["train_annotations"], world["train_images"], steps=30)
    assert stats["last_loss"] < stats["first_loss"] and stats["pair_accuracy"] > 0.7


def test_step0_baseline_and_before_after_report(world: dict[str, Path], tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """``eval_at_start``: the hook evaluates before the first step (checkpoint-0) on the same items as later
    checkpoints, and ``veritune report`` shows the before/after table and thumbnails."""
    from veritune.cli import main

    val = world["val_annotations"].parent
    result = run_entry(
        "grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        _oric_file(world, tmp_path),
        "--image_root",
        world["train_images"],
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--report_to",
        "none",
        "--max_completion_length",
        "8",
        "--eval_on_save",
        "true",
        "--eval_at_start",
        "true",
        "--eval_benchmarks",
        "pope",
        "--eval_limit",
        "6",
        "--eval_data",
        f"pope={world['val_pope_random']}",
        "--eval_image_root",
        val / "images",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first, last = (
        json.loads((tmp_path / "run" / "eval" / f"checkpoint-{s}" / "pope" / "metrics.json").read_text())
        for s in (0, 1)
    )
    assert first["counts"]["items"] == last["counts"]["items"] == 6
    assert main(["report", str(tmp_path / "run")]) == 0
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Before / after: step 0 against step 1" in page and "95% interval" in page
    assert page.count("data:image/png;base64,") >= 6


def _oric_file(world: dict[str, Path], tmp_path: Path) -> Path:
    """A few ORIC-format training questions about the train images (true labels from the annotations)."""
    present = _present(world["train_annotations"])
    items = []
    for number, (file_name, names) in enumerate(sorted(present.items())[:8], start=1):
        name = sorted(names)[0]
        items.append(
            {
                "id": number,
                "image": file_name,
                "target_object": name,
                "problem": f"Is there a {name} in the image?",
                "solution": "<SOLUTION>yes</SOLUTION>",
            }
        )
    path = tmp_path / "oric_train.json"
    path.write_text(json.dumps(items))
    return path


def test_sft_recipe_loads() -> None:
    from trl import SFTConfig

    from finetune.configs import VerituneModelConfig
    from finetune.recipe import parse_recipe
    from finetune.sft import SFTScriptArguments

    script_args, training_args, model_args = parse_recipe(
        ["recipes/miniature/tiny_sft_warmstart.yaml"], (SFTScriptArguments, SFTConfig, VerituneModelConfig)
    )
    assert Path(script_args.dataset_path).parts[-3:] == ("demo", "warmstart-data", "train.jsonl")
    assert training_args.completion_only_loss is True and training_args.seed == 0
    assert model_args.model_name_or_path == "outputs/demo/tiny-qwen3vl" and training_args.max_steps == 1400
    assert training_args.per_device_train_batch_size == 32 and training_args.learning_rate == 3e-4
    assert training_args.bf16 is False and training_args.dataloader_num_workers == 1


def test_demo_launches_each_recipe_with_its_accelerate_config() -> None:
    from miniature.stages import DPO_RECIPE, RECIPE, SFT_RECIPE, recipe_accelerate_config

    for recipe in (SFT_RECIPE, RECIPE, DPO_RECIPE):
        assert recipe_accelerate_config(recipe) == "recipes/accelerate/single.yaml"


def test_demo_background_stage_reports_its_log(tmp_path: Path) -> None:
    """A stage run beside GRPO writes its commands' output to its log; its failure reaches the foreground as
    one error naming the log."""
    import sys

    from core.errors import UserError
    from miniature.stages import Background, run_command

    def stage() -> None:
        run_command([sys.executable, "-c", "print('built'); raise SystemExit(3)"])

    background = Background("DPO", tmp_path / "logs" / "dpo.log", stage)
    with pytest.raises(UserError, match=r"DPO \(log: .*dpo.log\): demo step failed \(exit 3\)"):
        background.join()
    assert "built" in (tmp_path / "logs" / "dpo.log").read_text()


def test_miniature_grpo_recipe_loads() -> None:
    """Plain answers, the plain-answer reward and one replayed conventional question per four ORIC questions."""
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    script_args, training_args, _ = parse_recipe(
        ["recipes/miniature/tiny_oric_miniature.yaml"], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
    )
    assert script_args.prompt_template == "plain" and script_args.reward_funcs == ["plain_accuracy"]
    assert script_args.replay_path == "outputs/demo/world/train/coco_pope_random.json"
    assert script_args.replay_ratio == 0.5 and training_args.beta == 0.0  # chosen on dev (docs/LAB_NOTEBOOK.md)
    assert training_args.bf16 is False  # bf16 autocast: ~8x slower on a CPU without bf16 instructions


def test_replay_ratio_selection_rule() -> None:
    """demo-select's rule: the largest mean dev gain among ratios that keep POPE, else the smallest POPE drop."""
    from miniature.selection import choose_ratio, format_selection

    means = [
        {"ratio": 0.0, "oric_gain": 12.0, "pope_change": -4.0},
        {"ratio": 0.25, "oric_gain": 9.0, "pope_change": -1.5},
        {"ratio": 0.5, "oric_gain": 7.0, "pope_change": 0.5},
        {"ratio": 1.0, "oric_gain": 9.0, "pope_change": 1.0},
    ]
    assert choose_ratio(means) == 0.25  # ties on gain go to the smaller ratio
    assert choose_ratio(means, max_pope_drop=5.0) == 0.0
    assert choose_ratio([{"ratio": 0.5, "oric_gain": 3.0, "pope_change": -3.0}, means[0]]) == 0.5
    run = {"seed": 0, "ratio": 0.25, "oric_base": 45.0, "oric_gain": 9.0, "yes_proportion": [80.0, 60.0]}
    text = format_selection(
        {"runs": [{**run, "pope_base": 76.0, "pope_change": -1.5}], "means": means, "chosen": 0.25, "max_pope_drop": 2}
    )
    assert "chosen replay_ratio: 0.25" in text and "80.0 ->  60.0" in text
