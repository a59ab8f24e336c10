"""One GRPO step of a random-initialised model with the real Qwen3-VL-2B dimensions, on a GPU.

    python perf/bench_gpu.py [--size 2b|8b] [--lora]
    python perf/bench_gpu.py --smoke     # the same code path on a CPU, small dimensions, float32
    python perf/bench_gpu.py --parts grpo --grpo-args "--cache_implementation static"   # a variant's step

Runs one optimizer step of the ORIC recipe (8 generations of up to 256 tokens per prompt, bf16, sdpa)
through ``finetune/grpo.py`` with ``transformers`` generation, through ``finetune/grpo.py`` with colocated
vLLM (``recipes/qwen3vl_oric_vllm.yaml``'s settings) and through the plain-TRL baseline; one LoRA DPO step
(``recipes/qwen3vl_8b_finer_lora.yaml`` on a small FINER-format set); and ``veritune eval run`` on a
synthetic ORIC-Bench with both backends (transformers, vLLM). It prints generation tokens/s, training
tokens/s per GPU, model FLOPs utilisation against the GPU's bf16 dense peak, peak memory and the rollout
share of the GRPO step (TRL's own ``profiling/Time taken`` timers, recorded by ``perf/profiling_hook``), beside
the physical limits: decode bounded by HBM bandwidth (each decode step reads every weight once), training
by bf16 peak (6 FLOPs per parameter per token). Without a GPU it prints a note and exits 0; ``--smoke`` runs
the whole path on a CPU with small dimensions (its figures mean nothing; it checks the script before GPU
time is spent on it): the vLLM runs, which need a GPU, are then only parsed (recipe and flags), not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

# Published dense bf16 peaks and HBM bandwidths (vendor data sheets, SXM parts).
GPU_SPECS = {"H100": (989e12, 3.35e12), "H200": (989e12, 4.8e12), "A100": (312e12, 2.0e12)}

# Text and vision dimensions of the released Qwen3-VL checkpoints (their config.json files).
QWEN3VL_DIMS = {
    "2b": {
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "tie_word_embeddings": True,
        },
        "vision": {
            "depth": 24,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_heads": 16,
            "out_hidden_size": 2048,
            "deepstack_visual_indexes": [5, 11, 17],
        },
    },
    "smoke": {
        "text": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "tie_word_embeddings": True,
        },
        "vision": {
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "out_hidden_size": 64,
            "deepstack_visual_indexes": [0],
        },
    },
    "8b": {
        "text": {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "tie_word_embeddings": False,
        },
        "vision": {
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": 4096,
            "deepstack_visual_indexes": [8, 16, 24],
        },
    },
}


def gpu_specs(name: str) -> tuple[float, float]:
    for key, spec in GPU_SPECS.items():
        if key in name:
            return spec
    return GPU_SPECS["H100"]


def build_real_size_model(size: str, out_dir: Path, device: str = "cuda") -> Path:
    """A random-initialised Qwen3-VL with the released dimensions and the tiny model's tokenizer/processor
    (vocabulary size set to the real 151,936 so the embedding and LM head cost what they really cost)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen3VLConfig

    from miniature.tiny.models import build_tiny_model

    tiny = build_tiny_model("qwen3vl", out_dir / "tiny", format_warmup_steps=0)
    tiny_config = json.loads((tiny / "config.json").read_text())
    dims = QWEN3VL_DIMS[size]
    text = {**tiny_config["text_config"], **dims["text"], "vocab_size": 151936}
    vision = {**tiny_config["vision_config"], **dims["vision"], "num_position_embeddings": 2304}
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=tiny_config["image_token_id"],
        video_token_id=tiny_config["video_token_id"],
        vision_start_token_id=tiny_config["vision_start_token_id"],
        vision_end_token_id=tiny_config["vision_end_token_id"],
        tie_word_embeddings=dims["text"]["tie_word_embeddings"],
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    path = out_dir / f"qwen3vl-{size}-random"
    model.save_pretrained(path)
    AutoProcessor.from_pretrained(tiny).save_pretrained(path)
    return path


VLLM_FLAGS = [  # recipes/qwen3vl_oric_vllm.yaml's engine on one GPU (no ZeRO-3 in a one-process run)
    "--use_vllm",
    "true",
    "--vllm_mode",
    "colocate",
    "--vllm_gpu_memory_utilization",
    "0.35",
    "--vllm_max_model_length",
    "1280",
    "--vllm_enable_sleep_mode",
    "true",
]


def grpo_command(
    model: Path, data: Path, images: Path, out: Path, lora: bool, smoke: bool, vllm: bool, extra: tuple[str, ...] = ()
) -> list[str]:
    """``finetune/grpo.py`` on the ORIC recipe for two optimizer steps (the second is the one measured)."""
    command = [
        "recipes/qwen3vl_oric.yaml",
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(data),
        "--image_root",
        str(images),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",  # TRL's profiling timers reach the bench through perf/profiling_hook, not a tracker
        "--eval_on_save",
        "false",
        "--attn_implementation",
        "sdpa",
        "--global_batch_prompts",  # one prompt group per optimizer step, as perf/plain_trl_grpo.py's oric-gpu:
        "1",  # 1 prompt x 8 generations, 8 micro-steps of 1 completion
        "--rollout_batch_prompts",  # one generation per optimizer step (the recipe's rounds span 9 steps)
        "1",
        "--per_device_train_batch_size",
        "1",
        "--max_pixels",
        "4096" if smoke else "200704",
    ]
    if smoke:
        command += ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"]
    if lora:
        command += ["--use_peft", "true", "--lora_target_modules", "q_proj", "v_proj", "--lora_r", "32"]
    if vllm:
        command += VLLM_FLAGS
    return command + list(extra)


def dpo_command(model: Path, data: Path, out: Path, smoke: bool) -> list[str]:
    """``finetune/dpo.py`` on a FINER LoRA recipe for two optimizer steps."""
    command = ["recipes/qwen3vl_8b_finer_lora.yaml", "--model_name_or_path", str(model), "--dataset_path", str(data)]
    command += ["--output_dir", str(out), "--max_steps", "2", "--save_strategy", "no", "--report_to", "none"]
    command += ["--eval_strategy", "no", "--global_batch_size", "8", "--per_device_train_batch_size", "4"]
    command += ["--eval_on_save", "false", "--attn_implementation", "sdpa"]
    if smoke:
        command += ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"]
    return command


def check_parses(entry: str, command: list[str]) -> None:
    """Parse an entry point's command line as it would (recipe, overrides, value checks), without running it."""
    from finetune.configs import (
        DPOScriptArguments,
        GRPOScriptArguments,
        VerituneDPOConfig,
        VerituneGRPOConfig,
        VerituneModelConfig,
    )
    from finetune.recipe import parse_recipe

    types = (
        (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
        if entry == "grpo"
        else (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
    )
    parse_recipe(command, types)


class PeakMemory:
    """The largest device memory in use while the block runs (nvidia-smi, polled), in GiB; on a CPU (smoke),
    the largest resident set of the child processes so far."""

    def __init__(self, smoke: bool) -> None:
        self.smoke, self.peak = smoke, 0.0

    def __enter__(self) -> PeakMemory:
        import subprocess
        import threading

        self._done = threading.Event()

        def poll() -> None:
            while not self._done.is_set() and not self.smoke:
                query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
                used = subprocess.run(query, capture_output=True, text=True).stdout.split()
                self.peak = max(self.peak, float(used[0]) / 1024 if used else 0.0)
                self._done.wait(0.5)

        self._poller = threading.Thread(target=poll, daemon=True)
        self._poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import resource

        self._done.set()
        self._poller.join()
        if self.smoke:
            self.peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    import os
    import subprocess

    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ...: exit {result.returncode}\n{result.stderr[-3000:]}")


def rollout_seconds(log: Path) -> float | None:
    """Generation time of the whole run (weight pushes to vLLM included), from TRL's profiling timers as
    ``perf/profiling_hook`` recorded them (TRL itself sends them only to experiment trackers)."""
    if not log.is_file():
        return None
    keys = (".transformers.generate", ".transformers.generate_batch", ".vLLM.generate", ".sync_weights")
    timers = [
        seconds
        for line in log.read_text().splitlines()
        for name, seconds in json.loads(line).items()
        if name.endswith(keys)
    ]
    return sum(timers) if timers else None


def profiled_env(out: Path) -> dict[str, str]:
    """Environment for a run whose TRL profiling timers go to ``out/profiling.jsonl``."""
    import os

    hook = str(REPO_ROOT / "perf" / "profiling_hook")
    path = os.pathsep.join(filter(None, [hook, str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "VERITUNE_PROFILE_LOG": str(out / "profiling.jsonl")}


def run_step(
    script: str,
    model: Path,
    data: Path,
    images: Path,
    out: Path,
    lora: bool,
    smoke: bool = False,
    vllm: bool = False,
    extra: tuple[str, ...] = (),
) -> dict[str, float]:
    """One GRPO run of two steps (veritune's entry point or plain TRL); the second step's figures."""
    if script == "finetune/grpo.py":
        command = [sys.executable, script, *grpo_command(model, data, images, out, lora, smoke, vllm, extra)]
    else:
        command = [sys.executable, script, str(model), str(data), str(images), str(out), "2"]
        command += ["oric-smoke" if smoke else "oric-gpu"] + (["lora"] if lora else [])
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with PeakMemory(smoke) as memory:
        run(command, profiled_env(out))
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [row for row in state["log_history"] if "step_time" in row]
    rollout = rollout_seconds(out / "profiling.jsonl")
    return {
        "step_time": steps[-1]["step_time"],
        "peak_gib": memory.peak,
        "wall": time.perf_counter() - start,
        "mean_length": steps[-1].get("completions/mean_length", 0.0),
        # over the run's steps (TRL's timers carry no step): generation time / training-step time
        "rollout_share": rollout / sum(row["step_time"] for row in steps) if rollout is not None else None,
    }


def run_dpo(model: Path, data: Path, out: Path, smoke: bool) -> dict[str, float]:
    """Two LoRA DPO steps; the mean step time of the training loop (train_runtime / steps)."""
    with PeakMemory(smoke) as memory:
        run([sys.executable, "finetune/dpo.py", *dpo_command(model, data, out, smoke)])
    results = json.loads((out / "train_results.json").read_text())
    return {"step_time": results["train_runtime"] / 2, "peak_gib": memory.peak}


def run_eval(model: Path, bench_root: Path, out: Path, backend: str, smoke: bool, batch: int = 8) -> dict[str, float]:
    """``veritune eval run`` on the synthetic ORIC-Bench; items per second over the whole command (model
    load included) and the items answered."""
    command = [sys.executable, "-m", "veritune.cli", "eval", "run", "--model", str(model), "--benchmarks"]
    command += ["oric_bench", "--data-root", str(bench_root), "--out", str(out), "--backend", backend]
    command += [
        "--max-new-tokens",
        "16" if smoke else "64",
        "--batch-size",
        str(batch) if backend == "transformers" else "256",
    ]
    start = time.perf_counter()
    with PeakMemory(smoke) as memory:
        run(command)
    wall = time.perf_counter() - start
    items = json.loads((out / "oric_bench" / "metrics.json").read_text())["counts"]["items"]
    return {"wall": wall, "items": items, "peak_gib": memory.peak}


PARTS = ("grpo", "plain", "dpo", "eval", "vllm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(QWEN3VL_DIMS), default="2b")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="small dimensions on a CPU: checks the code path")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--grpo-args",
        default="",
        help="extra flags for the veritune GRPO run, space-separated (e.g. '--cache_implementation static')",
    )
    parser.add_argument("--eval-batch-size", type=int, default=8, help="eval run's --batch-size (transformers)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        parser.error(f"--parts: unknown {sorted(parts - set(PARTS))}; choose from {', '.join(PARTS)}")

    import importlib.util

    import torch

    if args.smoke:
        args.size = "smoke"
    elif not torch.cuda.is_available():
        print(
            "GPU section skipped: no CUDA device on this machine "
            "(run it where a GPU is lent; `--smoke` checks the code path on a CPU)."
        )
        return
    if "vllm" in parts and not args.smoke and importlib.util.find_spec("vllm") is None:
        print("vLLM runs skipped: vllm is not installed here (`pip install -e '.[vllm]'`)")
        parts.discard("vllm")

    from conftest import write_oric_fixture
    from eval_fixtures import write_oric_bench
    from helpers import write_finer_fixture

    name = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    peak_flops, bandwidth = gpu_specs(name)
    figures: dict[str, object] = {"device": name, "size": args.size, "lora": args.lora, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model = build_real_size_model(args.size, tmp_path, "cpu" if args.smoke else "cuda")
        from transformers import AutoConfig

        n_params = _count_parameters(AutoConfig.from_pretrained(model))
        figures["parameters"] = n_params
        tokens = 8 * 256  # one optimizer step: one prompt group, 8 generations of up to 256 tokens
        train_flops = 6 * n_params * tokens
        print(f"GPU: {name}; model: random Qwen3-VL-{args.size.upper()} ({n_params / 1e9:.2f} B parameters)")
        decode_limit = bandwidth / (2 * n_params)
        print(
            f"decode limit (HBM {bandwidth / 1e12:.2f} TB/s, bf16 weights read per step): "
            f"{decode_limit:,.0f} steps/s per sequence batch"
        )
        limit = peak_flops / (6 * n_params)
        print(f"training limit (bf16 peak {peak_flops / 1e12:.0f} TFLOP/s): {limit:,.0f} tokens/s")
        data, images = write_oric_fixture(tmp_path / "data", num_items=16)
        finer = write_finer_fixture(tmp_path / "finer", num_images=8)
        write_oric_bench(tmp_path / "bench", questions=64)
        columns = ["GRPO step", "step time (s)", "mean completion tokens", "tokens/s", "MFU", "rollout share"]
        columns.append("peak memory (GiB)")
        print("| " + " | ".join(columns) + " |\n" + "| --- " * len(columns) + "|", flush=True)
        steps = [
            ("grpo", "veritune, transformers generation", "finetune/grpo.py", False),
            ("plain", "plain TRL", "perf/plain_trl_grpo.py", False),
            ("vllm", "veritune, colocated vLLM", "finetune/grpo.py", True),
        ]
        for part, label, script, vllm in steps:
            if part not in parts or (vllm and args.smoke):  # vLLM needs a GPU: the smoke run parses its command
                continue
            extra = tuple(args.grpo_args.split()) if script == "finetune/grpo.py" else ()
            result = run_step(script, model, data, images, tmp_path / part, args.lora, args.smoke, vllm, extra)
            figures[part] = result
            share = f"{result['rollout_share']:.0%}" if result.get("rollout_share") is not None else "-"
            print(
                f"| {label} | {result['step_time']:.2f} | {result['mean_length']:.0f} "
                f"| {tokens / result['step_time']:,.0f} | "
                f"{train_flops / result['step_time'] / peak_flops:.1%} | {share} | {result['peak_gib']:.1f} |",
                flush=True,
            )
        if args.smoke and "vllm" in parts:  # vLLM needs a GPU: check that its runs would parse, and say so
            check_parses("grpo", grpo_command(model, data, images, tmp_path / "v", args.lora, True, vllm=True))
            print("vLLM runs (GRPO colocate, eval --backend vllm): parsed only; they need a GPU")
        if "dpo" in parts:
            dpo = figures["dpo"] = run_dpo(model, finer, tmp_path / "dpo", args.smoke)
            print(f"| LoRA DPO step (batch 8) | {dpo['step_time']:.2f} | - | - | - | - | {dpo['peak_gib']:.1f} |")
        backends = ["transformers"] if "eval" in parts else []
        backends += ["vllm"] if "vllm" in parts and "eval" in parts and not args.smoke else []
        for backend in backends:
            out = tmp_path / f"eval-{backend}"
            result = run_eval(model, tmp_path / "bench", out, backend, args.smoke, args.eval_batch_size)
            figures[f"eval_{backend}"] = result
            print(
                f"eval run --backend {backend}: {result['items']} items in {result['wall']:.1f} s "
                f"({result['items'] / result['wall']:.2f} items/s, model load included), "
                f"peak {result['peak_gib']:.1f} GiB",
                flush=True,
            )
    print("anchor: EasyR1 reports 1,600-2,000 tokens/s per GPU and 16-23% MFU for Qwen2.5-VL-7B GRPO on 8x H100")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def _count_parameters(config: object) -> int:
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    main()
