"""One GRPO step of a random-initialised model with the real Qwen3-VL-2B dimensions, on a GPU.

    python perf/bench_gpu.py [--size 2b|8b] [--lora]
    python perf/bench_gpu.py --smoke     # the same code path on a CPU, small dimensions, float32

Runs one optimizer step of the ORIC recipe (8 generations of up to 256 tokens per prompt, bf16, sdpa)
through ``finetune/grpo.py`` and through the plain-TRL baseline, and prints generation tokens/s, training
tokens/s per GPU, model FLOPs utilisation against the GPU's bf16 dense peak, and peak memory, beside the
physical limits: decode bounded by HBM bandwidth (each decode step reads every weight once), training by
bf16 peak (6 FLOPs per parameter per token). Without a GPU it prints a note and exits 0; ``--smoke`` runs
the whole path on a CPU with small dimensions (its figures mean nothing; it checks the script before GPU
time is spent on it).
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

    from veritune.tiny.models import build_tiny_model

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


def run_step(
    script: str, model: Path, data: Path, images: Path, out: Path, lora: bool, smoke: bool = False
) -> dict[str, float]:
    import resource
    import subprocess
    import threading

    command = [sys.executable, script]
    if script == "finetune/grpo.py":
        command += [
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
            "none",
            "--attn_implementation",
            "sdpa",
            "--gradient_accumulation_steps",
            "8",
            "--max_pixels",
            "4096" if smoke else "200704",
        ]
        if smoke:
            command += ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"]
        if lora:
            command += ["--use_peft", "true", "--lora_target_modules", "q_proj", "v_proj", "--lora_r", "32"]
    else:
        command += [str(model), str(data), str(images), str(out), "2", "oric-smoke" if smoke else "oric-gpu"]
    start = time.perf_counter()
    peak = [0.0]
    done = threading.Event()

    def poll_memory() -> None:  # the step runs in a child process: read the device's memory in use
        while not done.is_set() and not smoke:
            query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
            used = subprocess.run(query, capture_output=True, text=True).stdout.split()
            peak[0] = max(peak[0], float(used[0]) / 1024 if used else 0.0)
            done.wait(0.5)

    poller = threading.Thread(target=poll_memory, daemon=True)
    poller.start()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    done.set()
    poller.join()
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    if smoke:  # no device memory: the largest resident set of the children so far, in GiB
        peak[0] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    state = json.loads((out / "trainer_state.json").read_text())
    last = [row for row in state["log_history"] if "step_time" in row][-1]
    return {
        "step_time": last["step_time"],
        "peak_gib": peak[0],
        "wall": time.perf_counter() - start,
        "mean_length": last.get("completions/mean_length", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(QWEN3VL_DIMS), default="2b")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="small dimensions on a CPU: checks the code path")
    args = parser.parse_args()

    import torch

    if args.smoke:
        args.size = "smoke"
    elif not torch.cuda.is_available():
        print(
            "GPU section skipped: no CUDA device on this machine "
            "(run it where a GPU is lent; `--smoke` checks the code path on a CPU)."
        )
        return

    from conftest import write_oric_fixture

    name = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    peak_flops, bandwidth = gpu_specs(name)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model = build_real_size_model(args.size, tmp_path, "cpu" if args.smoke else "cuda")
        from transformers import AutoConfig

        n_params = _count_parameters(AutoConfig.from_pretrained(model))
        data, images = write_oric_fixture(tmp_path / "data", num_items=16)
        ours = run_step("finetune/grpo.py", model, data, images, tmp_path / "ours", args.lora, args.smoke)
        plain = run_step("perf/plain_trl_grpo.py", model, data, images, tmp_path / "plain", args.lora, args.smoke)

    tokens = 8 * 256  # one prompt group: 8 generations of up to 256 tokens
    train_flops = 6 * n_params * tokens
    print(f"GPU: {name}; model: random Qwen3-VL-{args.size.upper()} ({n_params / 1e9:.2f} B parameters)")
    print("| runner | step time (s) | mean completion tokens | training tokens/s | MFU | peak memory (GiB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, result in (("veritune", ours), ("plain TRL", plain)):
        print(
            f"| {label} | {result['step_time']:.2f} | {result['mean_length']:.0f} "
            f"| {tokens / result['step_time']:,.0f} | "
            f"{train_flops / result['step_time'] / peak_flops:.1%} | {result['peak_gib']:.1f} |"
        )
    decode_limit = bandwidth / (2 * n_params)
    print(
        f"decode limit (HBM {bandwidth / 1e12:.2f} TB/s, bf16 weights read per step): "
        f"{decode_limit:,.0f} steps/s per sequence batch"
    )
    print(f"training limit (bf16 peak {peak_flops / 1e12:.0f} TFLOP/s): {peak_flops / (6 * n_params):,.0f} tokens/s")
    print("anchor: EasyR1 reports 1,600-2,000 tokens/s per GPU and 16-23% MFU for Qwen2.5-VL-7B GRPO on 8x H100")


def _count_parameters(config: object) -> int:
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    main()
