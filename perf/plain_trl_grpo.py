"""The baseline for the wrapper-overhead benchmark: the tiny GRPO configuration written as a minimal
plain-TRL script, with none of veritune's recipe parsing, data checks or callbacks.

    python perf/plain_trl_grpo.py MODEL_DIR ORIC_JSON IMAGE_ROOT OUTPUT_DIR STEPS [tiny|oric-gpu|oric-smoke] [lora]

``tiny`` mirrors ``recipes/miniature/tiny_oric_demo.yaml`` on a CPU; ``oric-gpu`` mirrors ``recipes/qwen3vl_oric.yaml``
as ``perf/bench_gpu.py`` runs it (one prompt group of 8 generations per optimizer step, bf16);
``oric-smoke`` is that step on a CPU in float32 (``bench_gpu.py --smoke``). ``lora`` adds a rank-32 adapter on
the language model's q_proj and v_proj, as ``bench_gpu.py --lora`` gives veritune's side.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from datasets import Dataset
from peft import LoraConfig
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import GRPOConfig, GRPOTrainer

from rewards import accuracy_reward, format_reward

INSTRUCTION = (
    "Please first provide your reasoning or working out on how you would go about solving the question between "
    "<REASONING> and </REASONING> and then your final answer between <SOLUTION> and (put yes or no here) </SOLUTION>."
)


PROFILES = {
    "tiny": dict(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_completion_length=24,
        learning_rate=1e-4,
        use_cpu=True,
        gradient_checkpointing=False,
        optim="adamw_torch",
    ),
    "oric-gpu": dict(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=8,
        num_generations=8,
        max_completion_length=256,
        learning_rate=2e-6,
        bf16=True,
        gradient_checkpointing=True,
    ),
    # the oric-gpu step on a CPU in float32: bench_gpu.py --smoke checks the GPU benchmark's code path
    "oric-smoke": dict(
        per_device_train_batch_size=1,
        gradient_accumulation_steps=8,
        num_generations=8,
        max_completion_length=256,
        learning_rate=2e-6,
        use_cpu=True,
        gradient_checkpointing=True,
    ),
}
MAX_PIXELS = {"tiny": 4096, "oric-gpu": 200704, "oric-smoke": 4096}


def profile_args(profile: str) -> dict:
    """The profile's settings; BENCH_ROLLOUT_BATCH (completions per generation) and BENCH_MICRO_BATCH
    (per_device_train_batch_size) resize its batch as perf/bench_rollout.py's veritune side is resized:
    accumulation = rollout batch / micro-batch, one generation per optimizer step; BENCH_COMPLETION sets
    max_completion_length."""
    settings = dict(PROFILES[profile])
    if os.environ.get("BENCH_COMPLETION"):
        settings["max_completion_length"] = int(os.environ["BENCH_COMPLETION"])
    batch = os.environ.get("BENCH_ROLLOUT_BATCH")
    if batch:
        micro = int(os.environ.get("BENCH_MICRO_BATCH") or settings["per_device_train_batch_size"])
        settings.update(per_device_train_batch_size=micro, gradient_accumulation_steps=int(batch) // micro)
    return settings


def main(
    model_dir: str, data_file: str, image_root: str, output_dir: str, steps: int, profile: str = "tiny", lora: str = ""
) -> None:
    max_pixels = MAX_PIXELS[profile]
    records = json.loads(Path(data_file).read_text())
    rows = []
    for r in records:
        question = r["problem"].split("?")[0] + "?"
        image = Image.open(Path(image_root) / r["image"]).convert("RGB")
        scale = min(1.0, (max_pixels / (image.width * image.height)) ** 0.5)
        image = image.resize((int(image.width * scale), int(image.height * scale)), Image.Resampling.BICUBIC)
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "image": image,
                "solution": r["solution"],
            }
        )
    args = GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        beta=0.0,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        lr_scheduler_type="cosine",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        **profile_args(profile),
    )
    dtype = "bfloat16" if profile == "oric-gpu" else "float32"
    trainer = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa"),
        reward_funcs=[accuracy_reward, format_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoProcessor.from_pretrained(model_dir, padding_side="left"),
        peft_config=LoraConfig(r=32, lora_alpha=64, target_modules=r".*language_model.*\.(q_proj|v_proj)")
        if lora == "lora"
        else None,
    )
    trainer.train()
    trainer.save_state()


if __name__ == "__main__":
    main(*sys.argv[1:5], int(sys.argv[5]), *sys.argv[6:8])
