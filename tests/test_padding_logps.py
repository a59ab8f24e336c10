"""Per-token log-probs of a padded batch equal each row's alone (float32, within 1e-5), for GRPO and DPO, on the
tiny Qwen3-VL with images of three sizes (prompts of three lengths).

TRL left-pads a GRPO batch's prompts but builds Qwen-VL's ``mm_token_type_ids`` (where the image tokens sit,
for the rotary positions) with the processor's own padding side (TRL#5785): veritune's loader makes the
processor left-padded (``finetune.models.get_processor``), and a right-padded processor gives silently wrong
log-probs, which the GRPO test shows. TRL's DPO collator pads its prompts left whatever the processor says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import REPO_ROOT
from PIL import Image

from finetune.configs import VerituneModelConfig

SIZES = ((96, 160), (64, 64), (128, 64))  # three image sizes: grids of 4x2, 4x4 and 2x4 patches (2, 4, 2 tokens)
TOLERANCE = 1e-5


def images() -> list[Image.Image]:
    return [Image.new("RGB", size, (40 * i + 30, 90, 200 - 50 * i)) for i, size in enumerate(SIZES)]


def processor_padded(model_path: Path, side: str | None = None) -> Any:
    """veritune's processor (``finetune.models.get_processor``), or the same padded on ``side``."""
    from finetune.models import get_processor

    processor = get_processor(VerituneModelConfig(model_name_or_path=str(model_path)))
    if side is not None:
        processor.tokenizer.padding_side = side
    return processor


def load_model(model_path: Path) -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).train()


def question(index: int) -> list[dict[str, Any]]:
    words = [
        "Is there a cat on the red sofa?",
        "Is there an umbrella in this picture?",
        "Is there a dog on the left of the car?",
    ]
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": words[index]}]}]


# ---------------------------------------------------------------------------------------------- GRPO


class FixedCompletions:
    """``model.generate`` answering each prompt with a completion of its question's own (of a length of its
    own), the same for a prompt alone and in a batch."""

    ANSWERS = {
        "cat": "<SOLUTION>yes</SOLUTION>",
        "umbrella": "no",
        "dog": "<REASONING>a red one</REASONING> <SOLUTION>no</SOLUTION>",
    }

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        rows = []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            prompt = self.tokenizer.decode(ids[mask.bool()])
            (answer,) = [text for word, text in self.ANSWERS.items() if word in prompt]
            rows.append(self.tokenizer.encode(answer, add_special_tokens=False) + [self.tokenizer.eos_token_id])
        width = max(map(len, rows))
        padded = [row + [self.tokenizer.pad_token_id] * (width - len(row)) for row in rows]
        return torch.cat([input_ids, torch.tensor(padded, device=input_ids.device)], dim=1)


def grpo_logps(model_path: Path, root: Path, side: str | None, groups: list[int]) -> list[torch.Tensor]:
    """TRL's per-token log-probs of the completions (``old_per_token_logps`` of ``_generate_and_score_completions``,
    TRL's ``_get_per_token_logps_and_entropies`` on TRL's padded batch), one tensor per row, completion
    tokens only; ``groups``: the prompts of the batch (each G = 2 times)."""
    from datasets import Dataset

    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig
    from finetune.grpo_trainer import VerituneGRPOTrainer
    from finetune.recipe import parse_recipe

    recipe = [str(REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"), "--model_name_or_path", str(model_path)]
    recipe += ["--output_dir", str(root), "--report_to", "none", "--num_generations", "2"]
    recipe += ["--per_device_train_batch_size", "6", "--gradient_accumulation_steps", "1", "--num_iterations", "2"]
    recipe += ["--reward_funcs", "accuracy", "--reward_weights", "1.0"]
    _, args, _ = parse_recipe(recipe, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    processor = processor_padded(model_path, side)
    model = load_model(model_path)
    model.generate = FixedCompletions(processor.tokenizer)
    pictures = images()
    rows = [{"prompt": question(g), "image": pictures[g]} for g in groups for _ in range(2)]
    trainer = VerituneGRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=processor,
    )
    with torch.no_grad():
        out = trainer._generate_and_score_completions(rows)  # TRL's, as in every training step
    logps, mask = out["old_per_token_logps"], out["completion_mask"].bool()
    assert logps.dtype == torch.float32
    return [row[keep] for row, keep in zip(logps, mask, strict=True)]


@pytest.fixture(scope="module")
def grpo_alone(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> list[torch.Tensor]:
    root = tmp_path_factory.mktemp("grpo-alone")
    return [grpo_logps(tiny_qwen3vl, root / str(g), None, [g])[0] for g in range(len(SIZES))]


def differences(batch: list[torch.Tensor], alone: list[torch.Tensor]) -> list[float]:
    rows = batch[::2]  # each prompt's first completion (G = 2 copies of one prompt, one completion)
    assert [len(row) for row in rows] == [len(row) for row in alone]
    return [float((row - single).abs().max()) for row, single in zip(rows, alone, strict=True)]


def test_grpo_padded_batch_logps_equal_each_row_alone(
    tiny_qwen3vl: Path, tmp_path: Path, grpo_alone: list[torch.Tensor]
) -> None:
    batch = grpo_logps(tiny_qwen3vl, tmp_path, None, [0, 1, 2])  # veritune's processor
    assert max(differences(batch, grpo_alone)) <= TOLERANCE


def test_grpo_right_padded_processor_gives_wrong_logps(
    tiny_qwen3vl: Path, tmp_path: Path, grpo_alone: list[torch.Tensor]
) -> None:
    """Why the loader pads left: TRL's prompts are left-padded, the processor's ``mm_token_type_ids`` right. With
    up to 5 padding tokens (this batch: 4 and 5) the image run only shifts and the log-probs are silently wrong
    (1e-1 here); with more, the run is cut and Qwen3-VL's position ids fail with a shape mismatch."""
    batch = grpo_logps(tiny_qwen3vl, tmp_path, "right", [0, 1, 2])
    found = differences(batch, grpo_alone)
    assert found[1] <= TOLERANCE, found  # the longest prompt (33 tokens) has no padding
    assert min(found[0], found[2]) > 100 * TOLERANCE, found  # 4 and 5 padding tokens: no error, wrong numbers


# ---------------------------------------------------------------------------------------------- DPO


def dpo_rows(groups: list[int]) -> Any:
    """Preference rows in veritune's layout (``finetune.preference_data.iter_preference_rows``)."""
    from datasets import Dataset

    pictures = images()
    answers = [("Yes.", "No, there is none."), ("No.", "Yes, on the left."), ("Yes, a small one.", "No.")]
    rows = [
        {
            "images": [pictures[g]],
            "prompt": question(g),
            "chosen": [{"role": "assistant", "content": [{"type": "text", "text": answers[g][0]}]}],
            "rejected": [{"role": "assistant", "content": [{"type": "text", "text": answers[g][1]}]}],
        }
        for g in groups
    ]
    return Dataset.from_list(rows)


def dpo_logps(trainer: Any, model: Any, groups: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per-token log-probs of the chosen and rejected answers as ``DPOTrainer._compute_loss`` computes them (its
    collator's batch, the model with ``fused_lm_head``), answer tokens only, chosen rows then rejected; and the
    summed log-probs of ``DPOTrainer.compute_ref_log_probs`` on the same batch."""
    dataset = dpo_rows(groups)
    batch = trainer.data_collator([dataset[i] for i in range(len(dataset))])
    mask = batch["completion_mask"]
    kwargs = {key: value for key, value in batch.items() if key != "completion_mask"}
    with torch.no_grad():
        labels = batch["input_ids"].masked_fill(mask == 0, -100)
        logps = model(**kwargs, use_cache=False, labels=labels, fused_lm_head=True).log_probs
        summed = torch.cat(trainer.compute_ref_log_probs(model, batch))
    logps = logps[:, -(mask.size(1) - 1) :]
    assert logps.dtype == torch.float32
    return [row[keep] for row, keep in zip(logps, mask[:, 1:].bool(), strict=True)], summed


@pytest.mark.parametrize("side", [None, "right"])  # veritune's processor, and one padded right
def test_dpo_padded_batch_logps_equal_each_row_alone(tiny_qwen3vl: Path, tmp_path: Path, side: str | None) -> None:
    from trl import DPOTrainer

    from finetune.configs import DPOScriptArguments, VerituneDPOConfig
    from finetune.recipe import parse_recipe

    recipe = [str(REPO_ROOT / "recipes" / "miniature" / "tiny_finer_demo.yaml"), "--model_name_or_path"]
    recipe += [str(tiny_qwen3vl), "--output_dir", str(tmp_path), "--report_to", "none"]
    _, args, _ = parse_recipe(recipe, (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig))
    model = load_model(tiny_qwen3vl)
    processor = processor_padded(tiny_qwen3vl, side)
    trainer = DPOTrainer(model=model, args=args, train_dataset=dpo_rows([0, 1, 2]), processing_class=processor)
    batch, batch_sums = dpo_logps(trainer, model, [0, 1, 2])
    for g in range(len(SIZES)):
        (chosen, rejected), sums = dpo_logps(trainer, model, [g])
        for row, single in ((batch[g], chosen), (batch[len(SIZES) + g], rejected)):
            assert row.shape == single.shape
            assert float((row - single).abs().max()) <= TOLERANCE
        torch.testing.assert_close(batch_sums[[g, len(SIZES) + g]], sums, rtol=0, atol=1e-4)
