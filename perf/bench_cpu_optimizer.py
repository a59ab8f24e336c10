"""The FINER base's warm-start and its DPO (the demo's FINER chain, patch-8 demo-size tiny Qwen3-VL, tower frozen and
cached) with torch's AdamW in its per-tensor loop (without the ``miniature.cpu_speed.foreach_adamw`` plugin, torch's
CPU default) against its multi-tensor kernels (with it, as the recipes list it), one torch thread, run alternately;
the trained weights of both sides compared byte for byte.

    python perf/bench_cpu_optimizer.py [--repeats 3] [--steps 300] [--images 400]

Prints min and median step times per side (train_runtime / steps, so loading is excluded) and the median ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "perf"))
sys.path.insert(0, str(REPO_ROOT / "tests"))

from bench_cpu_training import run, sft_step_time, warmstart_table  # noqa: E402

SIDES = ("false", "true")
# the recipes' plugins with and without foreach_adamw (recipes/miniature/*.yaml list both)
PLUGINS = {
    "false": ["miniature.cpu_speed.compact_lm_head"],
    "true": ["miniature.cpu_speed.compact_lm_head", "miniature.cpu_speed.foreach_adamw"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="steps of each run")
    parser.add_argument("--images", type=int, default=400, help="train images of the drawn world")
    args = parser.parse_args()

    from miniature.tiny.models import build_tiny_model
    from miniature.world import build_synthetic_world

    times: dict[str, list[float]] = {}
    same: dict[str, list[bool]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model("qwen3vl", root / "patch8", seed=0, format_warmup_steps=0, size="demo", patch_size=8)
        world = build_synthetic_world(
            root / "drawn", num_train_images=args.images, num_val_images=1, instance_attributes="drawn"
        )
        table = warmstart_table(world, root / "attributes.jsonl", ("--attribute-pairs-per-image", "3"))
        pairs = root / "contrast"
        run(
            [sys.executable, "-m", "veritune.cli", "build", "finer-contrast", "--out", str(pairs)]
            + ["--scene-graphs", str(world["train_scene_graphs"]), "--image-root", str(world["train_images"])]
        )
        common = ["--model_name_or_path", str(model), "--save_strategy", "no", "--report_to", "none"]
        common += ["--image_root", str(world["train_images"]), "--max_steps", str(args.steps)]
        stages = {
            "warm-start (SFT, batch 32)": ("finetune/sft.py", "recipes/miniature/tiny_sft_attributes.yaml", table),
            "DPO (batch 4 pairs)": ("finetune/dpo.py", "recipes/miniature/tiny_finer_contrast.yaml", pairs),
        }
        for repeat in range(args.repeats):
            for stage, (script, recipe, data) in stages.items():
                weights = []
                for foreach in SIDES:  # alternately, so the machine's load hits both sides alike
                    out = root / f"{Path(script).stem}-{foreach}-{repeat}"
                    command = [sys.executable, script, recipe, *common, "--dataset_path", str(data)]
                    run([*command, "--plugins", *PLUGINS[foreach], "--output_dir", str(out)])
                    times.setdefault(f"{stage}, foreach_adamw={foreach}", []).append(sft_step_time(out))
                    weights.append((out / "model.safetensors").read_bytes())
                same.setdefault(stage, []).append(weights[0] == weights[1])
                print(f"repeat {repeat + 1}/{args.repeats}: {stage} done", file=sys.stderr, flush=True)

    print("| run | min step time (s) | median (s) | measured |\n| --- | --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {min(values):.4f} | {statistics.median(values):.4f} | {len(values)} |")
    print()
    for stage in stages:
        loop, foreach = (statistics.median(times[f"{stage}, foreach_adamw={side}"]) for side in SIDES)
        print(
            f"{stage}: per-tensor loop / foreach (median) {loop / foreach:.3f}; "
            f"the same weights in {sum(same[stage])} of {len(same[stage])} repeats"
        )


if __name__ == "__main__":
    main()
