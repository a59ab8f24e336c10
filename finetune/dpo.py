"""DPO on preference tuples: FINER-Tuning (FINER, arXiv 2603.17662, Sec. 3 Eq. 5, App. C, Table 10).

    veritune launch --config_file recipes/accelerate/zero2.yaml --num_processes 2 finetune/dpo.py \
        recipes/qwen3vl_8b_finer_lora.yaml

Any recipe key can be overridden on the command line (``--beta 0.2``). Reads a ``veritune build finer``
directory (its ``validation`` split gives the eval loss), the FINER-Tuning release JSONL or RLAIF-V rows;
rows whose chosen equals rejected and rows with missing images are dropped by the reader, counted, and
listed in ``<output_dir>/preference_data.json``; so are the rows whose prompt, images included, plus answer is
longer than ``max_length`` tokens (TRL's collator would cut them). Images are decoded lazily, scaled down to
``max_pixels``.

The reference model of Eq. 5 is never precomputed (TRL cannot for VLMs): with LoRA it is the policy with
its adapter disabled, evaluated online; full-parameter training loads a frozen copy. Where this departs
from the paper: FINER trained with LLaMA-Factory; the objective (sigmoid loss, beta 0.1), the
hyperparameters of Table 10 and LLaMA-Factory's defaults for what the table leaves out (LoRA alpha 2 x
rank, dropout 0, 768 x 768 pixels, 2,048 tokens) are kept, only the trainer is TRL's ``DPOTrainer``; LLaVA-1.6
and InternVL3.5 take 4,096 tokens, since their images alone can exceed 2,048 (docs/TRAINING.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trl import DPOTrainer

from core.io import atomic_write_json
from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
from finetune.dpo_data import DATA_REPORT_FILE, get_preference_datasets
from finetune.models import freeze_vision_tower, get_processor
from finetune.recipe import run_entry_script
from finetune.training import get_callbacks, get_model_and_processor, start_run, train_with_hooks
from finetune.vision_cache import cache_vision_features

logger = logging.getLogger("veritune.dpo")


def main(script_args: DPOScriptArguments, training_args: VerituneDPOConfig, model_args: VerituneModelConfig) -> None:
    if start_run(training_args, script_args, model_args):  # a finished run is not trained again
        return

    # ---- Data (read first: a bad file should not cost a model load)
    processor = None

    def load_processor() -> Any:
        nonlocal processor
        processor = get_processor(model_args)
        return processor

    train_dataset, eval_dataset, report = get_preference_datasets(script_args, training_args, load_processor)
    summary = f"{len(train_dataset)} training tuples" + (f", {len(eval_dataset)} validation" if eval_dataset else "")
    summary += f"; reader dropped {dict(report['train']['dropped']) or 'nothing'}"
    too_long = report["train"].get("longer_than_max_length")
    if too_long:
        summary += f"; {too_long} longer than max_length {training_args.max_length} dropped"
    logger.info("data: %s", summary)
    if training_args.process_index == 0:
        atomic_write_json(Path(training_args.output_dir) / DATA_REPORT_FILE, report)

    # ---- Model and processor
    model, processor, peft_config = get_model_and_processor(model_args, processor)

    # ---- Train
    trainer = DPOTrainer(
        model=model,
        ref_model=None,  # LoRA: the policy with its adapter disabled; full-parameter: a frozen copy
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args, model_args),
    )
    if model_args.vision_feature_cache and trainer.ref_model is not None:
        # a full-parameter run's reference is a second copy of the model: it never trains, so its tower's
        # features are cached too (a LoRA run's reference is the policy itself, adapter off: cached already)
        reference = trainer.accelerator.unwrap_model(trainer.ref_model)
        freeze_vision_tower(reference)
        cache_vision_features(reference)
    train_with_hooks(trainer, processor, script_args, training_args, model_args, data_summary=summary)


if __name__ == "__main__":
    run_entry_script(main, (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig))
