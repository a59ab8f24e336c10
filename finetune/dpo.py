"""DPO on preference tuples: FINER-Tuning (seed ``finer_tuning_dpo.txt``, Sec. 3 Eq. 5, App. C, Table 10).

    veritune launch --config_file recipes/accelerate/zero2.yaml --num_processes 2 finetune/dpo.py recipes/qwen3vl_8b_finer_lora.yaml

Any recipe key can be overridden on the command line (``--beta 0.2``). Reads a ``veritune build finer``
directory (its ``validation`` split gives the eval loss), the FINER-Tuning release JSONL or RLAIF-V rows;
rows whose chosen equals rejected and rows with missing images are dropped by the reader, counted, and
listed in ``<output_dir>/preference_data.json``. Images are decoded lazily, scaled down to ``max_pixels``.

The reference model of Eq. 5 is never precomputed (TRL cannot for VLMs): with LoRA it is the policy with
its adapter disabled, evaluated online; full-parameter training loads a frozen copy. Where this departs
from the paper: FINER trained with LLaMA-Factory; the objective (sigmoid loss, beta 0.1), the
hyperparameters of Table 10 and LLaMA-Factory's defaults for what the table leaves out (LoRA alpha 2 x
rank, dropout 0, 768 x 768 pixels, 2,048 tokens) are kept, only the trainer is TRL's ``DPOTrainer``.
"""

from __future__ import annotations

import logging
import random
import sys
from pathlib import Path
from typing import Any

from datasets import Dataset
from trl import DPOTrainer

from data_builders.finer.formats import PreferenceReport, load_preference_dataset, with_images
from finetune.configs import DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig
from finetune.recipe import parse_recipe
from finetune.training import (
    attach_model_card,
    get_callbacks,
    get_model_and_processor,
    log_run_header,
    report_finished_run,
    setup_logging,
    train_and_save,
)
from veritune.errors import UserError, exit_on_user_error
from veritune.io import atomic_write_json

logger = logging.getLogger("veritune.dpo")

DATA_REPORT_FILE = "preference_data.json"


def sample_indices(total: int, count: int | None, seed: int) -> list[int]:
    """Indices of at most ``count`` of ``total`` rows, drawn uniformly at random (seeded), in file order.

    >>> sample_indices(5, None, seed=0)
    [0, 1, 2, 3, 4]
    >>> sample_indices(1000, 3, seed=0) == sample_indices(1000, 3, seed=0)
    True
    """
    if count is None or count >= total:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), count))


def split_indices(total: int, ratio: float, seed: int) -> tuple[list[int], list[int]]:
    """``(train, validation)`` indices: a seeded ``ratio`` of ``total`` rows (at least one) held out."""
    count = max(1, round(total * ratio))
    if count >= total:
        raise UserError(f"validation_ratio: holding out {count} of {total} rows would leave none to train on")
    held_out = set(random.Random(seed).sample(range(total), count))
    return [i for i in range(total) if i not in held_out], sorted(held_out)


def read_split(path: str, script_args: DPOScriptArguments, split: str) -> tuple[Dataset, PreferenceReport]:
    """One split of any supported preference layout, with the reader's count of what it dropped and why."""
    report = PreferenceReport()
    image_root = Path(script_args.image_root) if script_args.image_root else None
    dataset = load_preference_dataset(Path(path), image_root, script_args.data_format, split=split, report=report)
    if len(report.missing_images) > 10:  # the reader logs the first ten
        logger.warning("%s: %d more missing images, all listed in %s", path, len(report.missing_images) - 10, DATA_REPORT_FILE)
    return dataset, report


def report_counts(report: PreferenceReport) -> dict[str, Any]:
    """The reader's report as plain JSON values."""
    return {"read": report.total, "kept": report.kept, "dropped": dict(report.dropped), "missing_images": report.missing_images}


def get_preference_datasets(script_args: DPOScriptArguments, training_args: VeritunDPOConfig) -> tuple[Dataset, Dataset | None, dict[str, Any]]:
    """Train and (when evaluating) validation datasets, images opened on access, and a report of what was
    kept and dropped (chosen equal to rejected and missing images are dropped once, by the reader)."""
    if not script_args.dataset_path:
        raise UserError("dataset_path: required (a `veritune build finer` directory or a preference JSONL)")
    train, train_report = read_split(script_args.dataset_path, script_args, "train")
    evaluation, eval_report = None, None
    if training_args.eval_strategy != "no":
        if script_args.eval_dataset_path or Path(script_args.dataset_path).is_dir():
            evaluation, eval_report = read_split(script_args.eval_dataset_path or script_args.dataset_path, script_args, "validation")
        else:  # one file: hold out Table 10's validation ratio before subsampling, so no eval row is trained on
            kept, held_out = split_indices(len(train), script_args.validation_ratio, training_args.seed)
            train, evaluation = train.select(kept), train.select(held_out)
    train = train.select(sample_indices(len(train), script_args.max_train_samples, training_args.seed))
    report = {"train": {"rows": len(train), **report_counts(train_report)}, "eval": None}
    if evaluation is not None:
        report["eval"] = {"rows": len(evaluation), **(report_counts(eval_report) if eval_report else {"held_out_of_train": True})}
    evaluation = None if evaluation is None else with_images(evaluation, script_args.max_pixels)
    return with_images(train, script_args.max_pixels), evaluation, report


def main(script_args: DPOScriptArguments, training_args: VeritunDPOConfig, model_args: VeritunModelConfig) -> None:
    setup_logging(training_args)
    if report_finished_run(training_args):  # a finished run is not trained again
        return

    # ---- Data (read first: a bad file should not cost a model load)
    train_dataset, eval_dataset, report = get_preference_datasets(script_args, training_args)
    summary = f"{len(train_dataset)} training tuples" + (f", {len(eval_dataset)} validation" if eval_dataset else "")
    summary += f"; reader dropped {dict(report['train']['dropped']) or 'nothing'}"
    logger.info("data: %s", summary)
    if training_args.process_index == 0:
        atomic_write_json(Path(training_args.output_dir) / DATA_REPORT_FILE, report)

    # ---- Model and processor
    model, processor, peft_config = get_model_and_processor(model_args)

    # ---- Train
    trainer = DPOTrainer(
        model=model,
        ref_model=None,  # LoRA: the policy with its adapter disabled; full-parameter: a frozen copy
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args),
    )
    log_run_header(trainer, script_args, model_args, data_summary=summary)
    attach_model_card(trainer, script_args, model_args)
    train_and_save(trainer, processor, training_args)


if __name__ == "__main__":
    args = exit_on_user_error(parse_recipe)(sys.argv[1:], (DPOScriptArguments, VeritunDPOConfig, VeritunModelConfig))
    exit_on_user_error(main)(*args)
