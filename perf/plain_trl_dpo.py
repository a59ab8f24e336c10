"""The DPO baseline for the wrapper-overhead benchmark: ``recipes/miniature/tiny_finer_demo.yaml`` written as a
minimal plain-TRL script (no recipe parsing, readers, checks or callbacks).

    python perf/plain_trl_dpo.py MODEL_DIR FINER_DATASET_DIR OUTPUT_DIR STEPS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from datasets import Dataset
from peft import LoraConfig
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import DPOConfig, DPOTrainer


def main(model_dir: str, data_dir: str, output_dir: str, steps: int) -> None:
    root = Path(json.loads((Path(data_dir) / "manifest.json").read_text())["image_root"])
    rows = []
    for line in (Path(data_dir) / "train.jsonl").read_text().splitlines():
        record = json.loads(line)
        image = Image.open(root / record["images"][0]).convert("RGB")
        scale = min(1.0, (4096 / (image.width * image.height)) ** 0.5)
        image = image.resize(
            (max(1, int(image.width * scale)), max(1, int(image.height * scale))), Image.Resampling.BICUBIC
        )
        rows.append(
            {"images": [image], "prompt": record["prompt"], "chosen": record["chosen"], "rejected": record["rejected"]}
        )
    args = DPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        beta=0.1,
        loss_type=["sigmoid"],
        learning_rate=5e-4,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_length=256,
        use_cpu=True,
        bf16=False,
        optim="adamw_torch",  # as the recipe: TRL's defaults (bf16, fused AdamW) would differ
        gradient_checkpointing=False,
        remove_unused_columns=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    lora = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=r"^(?!.*\bvisual\b).*\.(?:q_proj|v_proj)$",
        task_type="CAUSAL_LM",
    )
    trainer = DPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation="sdpa"),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoProcessor.from_pretrained(model_dir, padding_side="left"),
        peft_config=lora,
    )
    trainer.train()
    trainer.save_state()


if __name__ == "__main__":
    main(*sys.argv[1:4], int(sys.argv[4]))
