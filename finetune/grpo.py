"""GRPO Visual-RFT on ORIC-style yes/no questions (ORIC, arXiv 2509.15695, Sec. 5, App. C).

    veritune launch --config_file recipes/accelerate/zero3.yaml --num_processes 4 finetune/grpo.py \
        recipes/qwen3vl_oric.yaml

The recipe states its global batch in prompts (``global_batch_prompts``: Table 9's 16 prompts x G = 8 = 128
completions per optimizer step); gradient accumulation is derived from it and the process count, and a
launch whose process count cannot reach that batch exactly is refused with one ``error:`` line before any
model loads. ``rollout_batch_prompts`` generates once for several such optimizer steps (docs/SCALING.md,
"Rollout rounds").
Any recipe key can be overridden on the command line (``--learning_rate 1e-6``). Each question is wrapped
in the R1-style prompt of ORIC Fig. 11; the reward is ``accuracy + format`` (both weight 1) as in the
paper. Where this departs from the paper: TRL's GRPO computes the group z-score with the group's standard
deviation plus a small constant (``scale_rewards: group``) and the per-sequence 1/|o_i| normalisation is
``loss_type: grpo``; with ``beta: 0`` no reference model is loaded, exactly as Eq. 6 reduces to.
``replay_path`` (not in the paper, off in its recipes) mixes conventional questions in POPE's layout into the
data, ``replay_ratio`` per ORIC question: the tiny miniature needs them to keep its ordinary accuracy
(docs/LAB_NOTEBOOK_ARCHIVE.md#fourth-pass).
``multi_image_path`` mixes in multi-image questions in MIOH's format ("Fine-Grained Multi-Image Object Hallucination
Benchmark", Sec. 3, Table 1 and Fig. 2), ``multi_image_ratio`` per ORIC question, through TRL's multi-image path (an
``images`` list per row); their reward is the option grader's (``option_accuracy``), each image is scaled to
``max_pixels_per_image`` (docs/TRAINING.md, "Multi-image questions").
"""

from __future__ import annotations

import logging

from core.errors import UserError
from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.data_sources import source_label
from finetune.grpo_trainer import VerituneGRPOTrainer
from finetune.oric_data import get_oric_dataset
from finetune.recipe import run_entry_script
from finetune.training import get_callbacks, get_model_and_processor, start_run, train_with_hooks
from rewards import get_reward_funcs

logger = logging.getLogger("veritune.grpo")


def main(script_args: GRPOScriptArguments, training_args: VerituneGRPOConfig, model_args: VerituneModelConfig) -> None:
    if start_run(training_args, script_args, model_args):  # a finished run is not trained again
        return

    # ---- Rewards (their names were checked when the recipe was parsed: finetune.recipe.check_reward_funcs)
    reward_funcs = get_reward_funcs(script_args.reward_funcs)

    # ---- Model and processor
    model, processor, peft_config = get_model_and_processor(model_args)

    # ---- Data
    if not script_args.dataset_path and not script_args.dataset_name:
        raise UserError(
            "dataset_path: required (ORIC-format records: a JSON list, JSON lines, parquet or a save_to_disk "
            "folder), or dataset_name (a Hub dataset)"
        )
    train_dataset, report = get_oric_dataset(
        script_args.dataset_path,
        script_args.image_root,
        dataset_name=script_args.dataset_name,
        dataset_config=script_args.dataset_config,
        split=script_args.dataset_train_split,
        processor=processor,
        template=script_args.prompt_template,
        max_pixels=script_args.max_pixels,
        max_prompt_length=script_args.max_prompt_length,
        skip_bad_examples=script_args.skip_bad_examples,
        max_samples=script_args.max_train_samples,
        seed=training_args.seed,
        replay_path=script_args.replay_path,
        replay_ratio=script_args.replay_ratio,
        multi_image_path=script_args.multi_image_path,
        multi_image_root=script_args.multi_image_root,
        multi_image_ratio=script_args.multi_image_ratio,
        max_pixels_per_image=script_args.max_pixels_per_image,
    )
    source = source_label(
        script_args.dataset_path, script_args.dataset_name, script_args.dataset_config, script_args.dataset_train_split
    )
    logger.info("data from %s: %s", source, report.summary())
    for line in report.dropped_bad_image[:10]:
        logger.warning("dropped %s", line)
    if training_args.rollout_batch_prompts is not None:  # refused when not one round fits the data
        logger.info("%s", training_args.rollout_summary(len(train_dataset)))

    # ---- Train
    trainer = VerituneGRPOTrainer(  # TRL's, with rollout tables W&B can store (finetune/grpo_trainer.py)
        model=model,
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args, model_args),
    )
    train_with_hooks(trainer, processor, script_args, training_args, model_args, data_summary=report.summary())


if __name__ == "__main__":
    run_entry_script(main, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
