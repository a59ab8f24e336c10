"""DPO on preference tuples: FINER-Tuning (seed ``finer_tuning_dpo.txt``, Sec. 3, App. C, Table 10).

    accelerate launch --config_file recipes/accelerate/zero2.yaml finetune/dpo.py recipes/qwen3vl_8b_finer_lora.yaml

Reads a ``veritune build finer`` directory, the FINER-Tuning release JSONL or RLAIF-V rows. With LoRA, the
reference model is the policy with its adapter disabled, so the reference log-probs are computed online
(TRL cannot precompute them for VLMs). Where this departs from the paper: FINER trained with
LLaMA-Factory; the DPO objective (sigmoid loss, β) and hyperparameters are the same.
"""

from __future__ import annotations

import logging
import sys

from datasets import Dataset
from trl import DPOTrainer

from data_builders.finer.formats import read_preference_rows
from finetune.configs import DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig
from finetune.oric_data import load_image
from finetune.recipe import parse_recipe
from finetune.training import get_callbacks, get_model_and_processor, log_run_header, setup_logging, train_and_save
from veritune.errors import UserError, exit_on_user_error

logger = logging.getLogger("veritune.dpo")


def get_preference_dataset(path: str, image_root: str | None, fmt: str, max_pixels: int, split: str = "train",
                           max_samples: int | None = None) -> tuple[Dataset, str]:  # fmt: skip
    """Preference rows with images decoded lazily (and resized to ``max_pixels``) on access."""
    rows, report = read_preference_rows(path, image_root, fmt, split=split)
    if max_samples is not None:
        rows = rows[:max_samples]
    for missing in report.missing_images[:10]:
        logger.warning("missing image, row skipped: %s", missing)
    if not rows:
        raise UserError(f"{path}: no usable preference rows ({report.summary()})")

    def attach_images(batch: dict[str, list]) -> dict[str, list]:
        batch["images"] = [[load_image(p, max_pixels) for p in paths] for paths in batch["image_paths"]]
        return batch

    dataset = Dataset.from_list(rows)
    dataset.set_transform(attach_images)
    return dataset, report.summary()


def main(script_args: DPOScriptArguments, training_args: VeritunDPOConfig, model_args: VeritunModelConfig) -> None:
    setup_logging(training_args)

    # ---- Data
    if not script_args.dataset_path:
        raise UserError("dataset_path: required (a `veritune build finer` directory or a preference JSONL)")
    train_dataset, summary = get_preference_dataset(
        script_args.dataset_path, script_args.image_root, script_args.data_format, script_args.max_pixels,
        max_samples=script_args.max_train_samples,
    )  # fmt: skip
    eval_dataset = None
    if training_args.eval_strategy != "no":
        eval_path = script_args.eval_dataset_path or script_args.dataset_path
        split = "validation" if not script_args.eval_dataset_path else "train"
        eval_dataset, _ = get_preference_dataset(eval_path, script_args.image_root, script_args.data_format, script_args.max_pixels, split)
    logger.info("data: %s", summary)

    # ---- Model and processor
    model, processor, peft_config = get_model_and_processor(model_args)

    # ---- Train
    trainer = DPOTrainer(
        model=model,
        ref_model=None,  # full-parameter: a frozen copy; LoRA: the policy with its adapter disabled
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args),
    )
    log_run_header(trainer, script_args, model_args, data_summary=summary)
    train_and_save(trainer, processor, training_args)


if __name__ == "__main__":
    args = exit_on_user_error(parse_recipe)(sys.argv[1:], (DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig))
    exit_on_user_error(main)(*args)
