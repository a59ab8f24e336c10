"""CPU training settings of the miniature: GRPO with TRL's default bf16 autocast against fp32, the SFT
warm-start with and without a data worker, and the SFT forward + backward with the M-RoPE position ids
computed in the forward against given by the collator (``finetune/sft.py: PositionIdsCollator``), and with
TRL's fused LM head scoring every position against only the labelled ones
(``miniature/cpu_speed.py: set_cpu_compact_lm_head``, the ``compact_lm_head`` plugin), on the demo-size tiny
Qwen3-VL, one torch thread, run alternately; and the FINER base's warm-start (16 vision tokens, tower frozen,
attribute pairs) with the tower run at every step against ``vision_feature_cache`` (``finetune/vision_cache.py``),
and its DPO with the frozen reference run in the training step (on one torch thread, on two) against in the data
loader's worker (the ``reference_in_workers`` plugin, ``miniature/cpu_speed.py: ReferenceLogpsCollator``), whose trained
weights are compared byte for byte.

    python perf/bench_cpu_training.py [--repeats 3] [--grpo-steps 4] [--sft-steps 40] [--fb-batches 12]
                                      [--cache-steps 200] [--cache-images 400]

Prints min and median step times per side (TRL's logged ``step_time`` for GRPO, first step excluded as
warm-up; train_runtime / steps for SFT; one timed forward + backward of a 32-example batch, in this process,
for the position ids and the LM head) and the ratios. These figures chose ``bf16: false`` in the tiny GRPO
recipes, ``dataloader_num_workers: 1`` in ``recipes/miniature/tiny_sft_warmstart.yaml``, the collator's position ids
and the labelled-positions-only LM head. The GRPO and SFT runs are the entry scripts as they are (so with
the labelled-positions-only head).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))


def run(command: list[str], threads: int = 1) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    env["OMP_NUM_THREADS"] = str(threads)
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(command)}\n{result.stderr[-2000:]}")


def grpo_step_times(output_dir: Path) -> list[float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [row["step_time"] for row in state["log_history"] if "step_time" in row][1:]


def sft_step_time(output_dir: Path) -> float:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    runtime = next(row["train_runtime"] for row in state["log_history"] if "train_runtime" in row)
    return runtime / state["global_step"]


def warmstart_table(world: dict[str, Path], out: Path, flags: tuple[str, ...] = ()) -> Path:
    """The warm-start recipes' table of ``world``'s train split (``veritune build warmstart-data``), with
    ``flags`` added (the attribute recipe's pairs)."""
    command = [sys.executable, "-m", "veritune.cli", "build", "warmstart-data", "--out", str(out)]
    command += ["--annotations", str(world["train_annotations"]), "--image-root", str(world["train_images"])]
    run([*command, "--questions-per-image", "2", "--no-captions", "--answer-styles", "plain", *flags])
    return out


def forward_backward_times(
    model_dir: Path, world: dict[str, Path], table: Path, batches: int, repeats: int
) -> dict[str, list[float]]:
    """Forward + backward of the SFT loss on the same batches (TRL's fused LM head, as ``SFTTrainer`` runs it),
    alternately: position ids computed in the forward, given by the collator, and given by the collator with
    the head scoring only the labelled positions."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling
    from trl.trainer.utils import add_fused_lm_head

    from finetune.sft import SFTScriptArguments, examples_dataset, table_examples, with_position_ids
    from miniature.cpu_speed import set_cpu_compact_lm_head

    torch.set_num_threads(1)
    examples = table_examples(SFTScriptArguments(dataset_path=str(table), image_root=str(world["train_images"])))
    dataset = examples_dataset(examples)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    processor = AutoProcessor.from_pretrained(model_dir)
    collator = DataCollatorForVisionLanguageModeling(processor, completion_only_loss=True)
    with_ids = with_position_ids(collator, model)
    sides: list[tuple[str, dict, bool]] = []
    for b in range(batches):
        batch = with_ids([dict(dataset[i]) for i in range(b * 32, (b + 1) * 32)])
        without = {key: value for key, value in batch.items() if key != "position_ids"}
        sides += [
            (f"{FB}M-RoPE ids computed in the forward, {EVERY}", without, False),
            (f"{FB}M-RoPE ids given by the collator, {EVERY}", batch, False),
            (f"{FB}M-RoPE ids given by the collator, {LABELLED}", batch, True),
        ]

    def step(batch: dict, labelled: bool) -> float:
        set_cpu_compact_lm_head(labelled)
        start = time.perf_counter()
        out = model(**batch, fused_lm_head=True)
        (-out.log_probs.sum() / out.label_mask.sum()).backward()
        model.zero_grad()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, batch, labelled in sides:
            times.setdefault(name, []).append(step(batch, labelled))
    set_cpu_compact_lm_head(False)
    return times


FB = "SFT forward + backward (batch 32), "
EVERY = "LM head on every position"
LABELLED = "LM head on the labelled positions"


CACHED_DPO = (
    "DPO step (batch 4), full parameters, tower frozen (recipes/miniature/tiny_finer_contrast.yaml), "
    "vision_feature_cache="
)
CACHED = "SFT step (batch 32), patch-8 tower frozen (recipes/miniature/tiny_sft_attributes.yaml), vision_feature_cache="


REFERENCE_DPO = "DPO step (batch 4), tower frozen and cached (recipes/miniature/tiny_finer_contrast.yaml), reference "
ONLINE = ["--dataloader_num_workers", "0", "--dataloader_persistent_workers", "false"]
ONLINE += ["--plugins", "miniature.cpu_speed.compact_lm_head", "miniature.cpu_speed.foreach_adamw"]
REFERENCE_SIDES = (
    ("in the step, one torch thread", 1, ONLINE),
    ("in the step, two torch threads", 2, ONLINE),
    ("in the data worker, one torch thread (the recipe's)", 1, []),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--fb-batches", type=int, default=12)
    parser.add_argument("--cache-steps", type=int, default=200, help="SFT steps of the vision-feature-cache runs")
    parser.add_argument("--cache-images", type=int, default=400, help="train images of those runs' drawn world")
    args = parser.parse_args()

    from conftest import write_oric_fixture

    from miniature.tiny.models import build_tiny_model
    from miniature.world import build_synthetic_world

    times: dict[str, list[float]] = {}
    same_weights: list[bool] = []  # the one-thread and two-thread DPO runs' trained weights, byte for byte
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model = build_tiny_model("qwen3vl", tmp_path / "model", seed=0, format_warmup_steps=0, size="demo")
        data, images = write_oric_fixture(tmp_path / "oric", num_items=64)
        world = build_synthetic_world(tmp_path / "world", num_train_images=200, num_val_images=1)
        table = warmstart_table(world, tmp_path / "warmstart.jsonl")
        common = ["--model_name_or_path", str(model), "--save_strategy", "no", "--report_to", "none"]
        for repeat in range(args.repeats):
            for bf16 in ("true", "false"):  # alternately, so load on the machine hits both sides alike
                out = tmp_path / f"grpo-{bf16}-{repeat}"
                grpo = [sys.executable, "finetune/grpo.py", "recipes/miniature/tiny_oric_miniature.yaml", *common]
                grpo += ["--dataset_path", str(data), "--image_root", str(images), "--replay_path", ""]
                grpo += ["--max_steps", str(args.grpo_steps), "--bf16", bf16, "--output_dir", str(out)]
                run(grpo)
                times.setdefault(f"GRPO step, bf16={bf16}", []).extend(grpo_step_times(out))
            for workers in ("0", "1"):
                out = tmp_path / f"sft-{workers}-{repeat}"
                sft = [sys.executable, "finetune/sft.py", "recipes/miniature/tiny_sft_warmstart.yaml", *common]
                sft += ["--dataset_path", str(table), "--image_root", str(world["train_images"])]
                sft += ["--max_steps", str(args.sft_steps), "--dataloader_num_workers", workers]
                sft += ["--dataloader_persistent_workers", "true" if workers != "0" else "false"]
                sft += ["--output_dir", str(out)]
                run(sft)
                times.setdefault(f"SFT step (batch 32), data workers={workers}", []).append(sft_step_time(out))
        times.update(forward_backward_times(model, world, table, args.fb_batches, args.repeats))
        # the FINER base's warm-start: 16 vision tokens, tower frozen, the attribute pairs; tower run or cached
        patch8 = build_tiny_model(
            "qwen3vl", tmp_path / "patch8", seed=0, format_warmup_steps=0, size="demo", patch_size=8
        )
        drawn = build_synthetic_world(
            tmp_path / "drawn", num_train_images=args.cache_images, num_val_images=1, instance_attributes="drawn"
        )
        drawn_table = warmstart_table(drawn, tmp_path / "attributes.jsonl", ("--attribute-pairs-per-image", "3"))
        for repeat in range(args.repeats):
            for cache in ("false", "true"):
                out = tmp_path / f"sft-cache-{cache}-{repeat}"
                sft = [sys.executable, "finetune/sft.py", "recipes/miniature/tiny_sft_attributes.yaml", *common]
                sft[sft.index("--model_name_or_path") + 1] = str(patch8)
                sft += ["--dataset_path", str(drawn_table), "--image_root", str(drawn["train_images"])]
                sft += ["--max_steps", str(args.cache_steps), "--vision_feature_cache", cache, "--output_dir", str(out)]
                run(sft)
                times.setdefault(f"{CACHED}{cache}", []).append(sft_step_time(out))
        # the DPO measured on that base (image-contrast pairs, a reference copy), on a world small enough that each
        # image comes back about as often as in the measured runs (1,000 images, 9,600 steps of 4 rows: ~38 times)
        dpo_world = build_synthetic_world(
            tmp_path / "drawn-dpo",
            num_train_images=max(2, args.cache_steps * 4 // 38),
            num_val_images=1,
            instance_attributes="drawn",
        )
        pairs = tmp_path / "contrast"
        run(
            [sys.executable, "-m", "veritune.cli", "build", "finer-contrast", "--out", str(pairs)]
            + ["--scene-graphs", str(dpo_world["train_scene_graphs"]), "--image-root", str(dpo_world["train_images"])]
        )
        for repeat in range(args.repeats):
            for cache in ("false", "true"):
                out = tmp_path / f"dpo-cache-{cache}-{repeat}"
                dpo = [sys.executable, "finetune/dpo.py", "recipes/miniature/tiny_finer_contrast.yaml", *common]
                dpo[dpo.index("--model_name_or_path") + 1] = str(patch8)
                dpo += ["--dataset_path", str(pairs), "--image_root", str(dpo_world["train_images"])]
                dpo += ["--max_steps", str(args.cache_steps), "--vision_feature_cache", cache, "--output_dir", str(out)]
                run(dpo)
                times.setdefault(f"{CACHED_DPO}{cache}", []).append(sft_step_time(out))
        # the same DPO (tower cached) with the frozen reference in the training step, on one torch thread and on
        # two, and in the data loader's worker beside a one-thread step (reference_in_workers, the demo's
        # recipe): the trained weights are compared byte for byte on every repeat
        for repeat in range(args.repeats):
            weights = []
            for name, threads, extra in REFERENCE_SIDES:
                out = tmp_path / f"dpo-reference-{len(weights)}-{repeat}"
                dpo = [sys.executable, "finetune/dpo.py", "recipes/miniature/tiny_finer_contrast.yaml", *common]
                dpo[dpo.index("--model_name_or_path") + 1] = str(patch8)
                dpo += ["--dataset_path", str(pairs), "--image_root", str(dpo_world["train_images"])]
                dpo += ["--max_steps", str(args.cache_steps), "--output_dir", str(out), *extra]
                run(dpo, threads=threads)
                times.setdefault(f"{REFERENCE_DPO}{name}", []).append(sft_step_time(out))
                weights.append((out / "model.safetensors").read_bytes())
            same_weights.append(all(weight == weights[0] for weight in weights))

    print("| run | min step time (s) | median (s) | measured |\n| --- | --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {min(values):.3f} | {statistics.median(values):.3f} | {len(values)} |")
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"\nGRPO bf16 autocast / fp32 (median): {median['GRPO step, bf16=true'] / median['GRPO step, bf16=false']:.1f}"
    )
    sft_ratio = median["SFT step (batch 32), data workers=0"] / median["SFT step (batch 32), data workers=1"]
    print(f"SFT no worker / one worker (median): {sft_ratio:.2f}")
    computed, given = (
        median[f"{FB}M-RoPE ids {where}, {EVERY}"] for where in ("computed in the forward", "given by the collator")
    )
    print(
        f"SFT forward + backward, ids computed in the forward / given by the collator (median): {computed / given:.2f}"
    )
    labelled = median[f"{FB}M-RoPE ids given by the collator, {LABELLED}"]
    print(f"SFT forward + backward, LM head on every position / on the labelled ones (median): {given / labelled:.2f}")
    uses = args.cache_steps * 32 / args.cache_images
    print(
        f"SFT step, frozen tower run / cached (median, {args.cache_images} images, about {uses:.0f} questions per "
        f"image over the run): {median[f'{CACHED}false'] / median[f'{CACHED}true']:.2f}"
    )
    dpo_ratio = median[f"{CACHED_DPO}false"] / median[f"{CACHED_DPO}true"]
    dpo_images = max(2, args.cache_steps * 4 // 38)
    print(
        f"DPO step, frozen tower run / cached (median, {dpo_images} images, about 38 rows per image): {dpo_ratio:.2f}"
    )
    online, two, worker = (median[f"{REFERENCE_DPO}{name}"] for name, _, _ in REFERENCE_SIDES)
    print(f"DPO step, reference in the step on one thread / in the data worker (median): {online / worker:.2f}")
    print(f"DPO step, reference in the step on two threads / in the data worker (median): {two / worker:.2f}")
    same = f"{sum(same_weights)} of {len(same_weights)}"
    print(f"DPO trained weights, the three ways: the same bytes in {same} repeats")


if __name__ == "__main__":
    main()
