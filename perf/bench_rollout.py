"""Rollout-batch sweep of one GRPO step on a GPU: veritune and plain TRL at generation batches of B completions.

    python perf/bench_rollout.py --size 2b --runs veritune:8,veritune:64,veritune:256,plain:256
    python perf/bench_rollout.py --size 2b --runs veritune:256,compiled:256        # compiled_decode: true
    python perf/bench_rollout.py --smoke --runs veritune:8:1,veritune:8:2,veritune:8:8 --repeat 3  # micro-batch
    python perf/bench_rollout.py --size 8b --lora --runs veritune:8,veritune:256,veritune:64
    python perf/bench_rollout.py --size 2b --engine-probe          # text-only decode: generate vs generate_batch
    python perf/bench_rollout.py --smoke                            # the same path on a CPU, tiny dimensions

Same step as perf/bench_gpu.py (random Qwen3-VL with the released dimensions, bf16, sdpa, the ORIC recipe's
sampling, 256-token completions: a random model never stops early), with three changes:

- the rollout batch: B completions (B/8 prompts x G = 8) generated in one ``generate`` call, trained in
  micro-batches of ``--micro-batch`` completions, one optimizer step per generation (no old-log-prob pass);
- realistic prompts: the processor gets Qwen3-VL's real pixel budget (shortest edge 65,536 px, longest
  ``--max-pixels``) and the fixture images are ``--image-size`` noise (640x480: 192 image tokens at 200,704 px,
  about 263 prompt tokens), where bench_gpu.py's tiny processor gives 2 image tokens and 73-token prompts;
- a deadline: runs are done in the order given and one that would not finish before ``--deadline-s`` is
  skipped (printed as such), so one device call never overruns.

A run is SCRIPT:B[:MICRO]: SCRIPT is ``veritune`` (finetune/grpo.py), ``compiled`` (the same with the recipe key
``compiled_decode: true``: a static KV cache and a compiled decode step, prompts bucketed to 64 tokens; its first
step pays the compilation and is not the one measured) or ``plain`` (perf/plain_trl_grpo.py); MICRO is
``per_device_train_batch_size`` in completions (default ``--micro-batch``). ``--repeat N`` runs the list N times,
interleaved, and prints the min and median step time of each run.

It prints, per run: step time, completion tokens/s (this repo's figure), all tokens/s (prompt + completion,
the figure EasyR1 and verl call throughput), generation tokens/s and ms per decode step, MFU on completion
tokens (6 x all parameters, as bench_gpu.py) and "actor MFU" (6 x language-model parameters x all tokens over
the step time less the rollout: EasyR1's perf/mfu_actor counts only its update_policy time), and ends with a
figures table (perf/figures.py: each run's medians, and veritune's step over plain TRL's at the same B), which
``make bench`` compares with the one recorded in docs/PERFORMANCE.md. ``--smoke`` generates 32-token completions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu as bg  # noqa: E402  (puts the repo root and tests/ on sys.path)
from figures import figures_table  # noqa: E402

REPO_ROOT = bg.REPO_ROOT
GROUP = 8


def realistic_processor(model: Path, max_pixels: int, smoke: bool) -> None:
    """Give the saved processor Qwen3-VL's real pixel budget (the tiny one caps images at 64 x 64 px)."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model)
    shortest = 1024 if smoke else 65536  # Qwen3-VL's preprocessor_config.json: 65,536 .. 16,777,216 px
    processor.image_processor.size = {"shortest_edge": shortest, "longest_edge": max_pixels}
    processor.save_pretrained(model)


def write_fixture(root: Path, items: int, image_size: tuple[int, int]) -> tuple[Path, Path]:
    """bench_gpu.py's ORIC fixture with ``items`` questions, each image replaced by noise of ``image_size``."""
    import numpy as np
    from conftest import write_oric_fixture
    from PIL import Image

    data, images = write_oric_fixture(root, num_items=items)
    rng = np.random.default_rng(0)
    for path in images.glob("*.jpg"):
        pixels = rng.integers(0, 256, (image_size[1], image_size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, quality=90)
    return data, images


def measured_step(out: Path) -> dict[str, float]:
    """The last optimizer step's figures from TRL's log and the profiling hook's timers."""
    rows = [r for r in json.loads((out / "trainer_state.json").read_text())["log_history"] if "step_time" in r]
    last = rows[-1]
    tokens = [r.get("num_tokens", 0.0) for r in rows]
    timers = [json.loads(line) for line in (out / "profiling.jsonl").read_text().splitlines()]
    generate = [s for t in timers for n, s in t.items() if n.endswith((".transformers.generate", ".generate_batch"))]
    return {
        "step_time": last["step_time"],
        "mean_length": last.get("completions/mean_length", 0.0),
        "all_tokens": tokens[-1] - (tokens[-2] if len(tokens) > 1 else 0.0),
        "rollout": generate[-1] if generate else float("nan"),
    }


def run_one(
    script: str, batch: int, micro: int, paths: dict[str, Path], args: argparse.Namespace, timeout: float | None
) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"{script}-{batch}-{micro}-", dir=paths["tmp"]))
    env = bg.profiled_env(out)
    if script in ("veritune", "compiled"):
        extra = ("--global_batch_prompts", str(batch // GROUP), "--per_device_train_batch_size", str(micro))
        extra += ("--max_completion_length", str(args.completion))
        extra += ("--compiled_decode", "true") if script == "compiled" else ()
        extra += tuple(args.grpo_args.split())
        command = [sys.executable, "finetune/grpo.py"]
        command += bg.grpo_command(
            paths["model"], paths["data"], paths["images"], out, args.lora, args.smoke, False, extra
        )
        if not args.smoke:
            command += ["--max_pixels", str(args.max_pixels)]
    else:
        command = [sys.executable, "perf/plain_trl_grpo.py", str(paths["model"]), str(paths["data"])]
        command += [str(paths["images"]), str(out), "2", "oric-smoke" if args.smoke else "oric-gpu"]
        command += ["lora"] if args.lora else []
        env |= {"BENCH_ROLLOUT_BATCH": str(batch), "BENCH_MICRO_BATCH": str(micro)}
        env |= {"BENCH_COMPLETION": str(args.completion)}
    start = time.perf_counter()
    with bg.PeakMemory(args.smoke) as memory:
        result = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout
        )
    (out / "stderr.log").write_text(result.stderr)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return {"error": f"exit {result.returncode}: {last[:200]}"}
    figures = measured_step(out)
    figures |= {"wall": time.perf_counter() - start, "peak_gib": memory.peak}
    return figures


def engine_probe(size: str, batch: int, prompt: int, deadline: float, smoke: bool, completion: int) -> None:
    """Text-only decoder with the language model's dimensions: B prompts of ``prompt`` tokens, 256 new tokens,
    the recipe's sampling; ``generate`` (dynamic cache, eager: TRL's path) against ``generate_batch``
    (continuous batching, paged cache, CUDA graphs off: TRL's use_transformers_paged path, text-only) and,
    time allowing, ``generate`` with a static cache compiled (CUDA graphs), which TRL 1.16 turns off."""
    import torch
    from transformers import CompileConfig, GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from transformers.generation import ContinuousBatchingConfig

    dims = bg.QWEN3VL_DIMS[size]["text"]
    config = Qwen3Config(**dims, vocab_size=151936 if not smoke else 1024, max_position_embeddings=4096)
    device = "cpu" if smoke else "cuda"
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.float32 if smoke else torch.bfloat16).eval()
    model.config._attn_implementation = "sdpa"
    ids = torch.randint(100, config.vocab_size - 1, (batch, prompt), device=device)
    sampling = dict(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, eos_token_id=None, pad_token_id=0)

    def timed(fn):
        if not smoke:
            torch.cuda.synchronize()
        start = time.perf_counter()
        produced = fn()
        if not smoke:
            torch.cuda.synchronize()
        return time.perf_counter() - start, produced

    print(f"engine probe: text-only {size} decoder, {batch} x {prompt}-token prompts, {completion} new tokens")
    print("| path | seconds | tokens | tokens/s | ms per decode step |\n| --- | --- | --- | --- | --- |", flush=True)

    def row(name, fn, count):
        try:
            seconds, out = timed(fn)
        except Exception as err:  # noqa: BLE001 - a failing path is a finding, the others still run
            print(f"| {name} | failed: {type(err).__name__}: {str(err).splitlines()[0][:160]} |", flush=True)
            return
        tokens = count(out)
        print(
            f"| {name} | {seconds:.2f} | {tokens} | {tokens / seconds:,.0f} | {1000 * seconds / completion:.1f} |",
            flush=True,
        )

    def new_tokens(out):
        return (out.shape[1] - prompt) * batch

    eager = GenerationConfig(max_new_tokens=completion, disable_compile=True, **sampling)
    model.generate(ids[:, :8], generation_config=GenerationConfig(max_new_tokens=4, **sampling))  # warm-up
    row(
        "generate, dynamic cache, eager (TRL default)", lambda: model.generate(ids, generation_config=eager), new_tokens
    )
    cb_config = ContinuousBatchingConfig(use_cuda_graph=False, max_memory_percent=0.5)
    cb_gen = GenerationConfig(
        max_new_tokens=completion, eos_token_id=-1, **{k: v for k, v in sampling.items() if k != "eos_token_id"}
    )
    if time.time() < deadline - 20:
        lists = ids.tolist()
        row(
            "generate_batch, paged, graphs off (TRL paged, text-only)",
            lambda: model.generate_batch(lists, generation_config=cb_gen, continuous_batching_config=cb_config),
            lambda out: sum(len(o.generated_tokens) for o in out.values()),
        )
    if not smoke and time.time() < deadline - 150:
        static = GenerationConfig(
            max_new_tokens=completion,
            cache_implementation="static",
            compile_config=CompileConfig(fullgraph=True, mode="reduce-overhead"),
            **sampling,
        )
        run = lambda: model.generate(ids, generation_config=static)  # noqa: E731
        row("static cache + compile: first call (compiles)", run, new_tokens)
        row("static cache + compile: second call", run, new_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["2b", "8b"], default="2b")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--runs",
        default="veritune:8,veritune:64,veritune:256,plain:256",
        help="SCRIPT:B[:MICRO] in priority order; SCRIPT is veritune, compiled or plain; B completions per rollout",
    )
    parser.add_argument("--micro-batch", type=int, default=8, help="per_device_train_batch_size (completions)")
    parser.add_argument("--repeat", type=int, default=1, help="run the list this many times, interleaved")
    parser.add_argument("--completion", type=int, help="max_completion_length (default 256; 32 with --smoke)")
    parser.add_argument("--image-size", default="640x480")
    parser.add_argument("--max-pixels", type=int, default=200704)
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="seconds from start; later runs skip")
    parser.add_argument(
        "--estimate-s",
        default="8:40,64:50,256:75",
        help="B:seconds a run is expected to take (2B; 8B x 1.6); a run not fitting is skipped",
    )
    parser.add_argument(
        "--compile-s", type=float, default=100.0, help="seconds a compiled run adds to its estimate (compilation)"
    )
    parser.add_argument("--engine-probe", action="store_true", help="also the text-only decode probe at B=256")
    parser.add_argument("--grpo-args", default="", help="extra flags for the veritune and compiled runs")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work-dir", type=Path, help="keep the runs' folders here")
    args = parser.parse_args()
    args.completion = args.completion or (32 if args.smoke else 256)
    start = time.time()
    deadline = start + args.deadline_s

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("GPU section skipped: no CUDA device on this machine (`--smoke` checks the code path on a CPU).")
        return
    size = "smoke" if args.smoke else args.size
    runs = [parse_run(r, args.micro_batch) for r in args.runs.split(",") if r] * args.repeat
    estimate = {
        int(k): float(v) * (1.6 if size == "8b" else 1.0) for k, v in (p.split(":") for p in args.estimate_s.split(","))
    }
    name = "CPU (smoke run)" if args.smoke else torch.cuda.get_device_name()
    peak_flops, bandwidth = bg.gpu_specs(name)
    results: dict[str, object] = {"device": name, "size": size, "lora": args.lora, "torch": torch.__version__}
    tmp = tempfile.mkdtemp(dir=args.work_dir)  # kept when --work-dir is given (each run's stderr.log is there)
    try:
        if runs:
            sweep(runs, size, name, peak_flops, bandwidth, estimate, deadline, start, Path(tmp), args, results)
        if args.engine_probe and time.time() < deadline - 40:
            batch, prompt = (16, 32) if args.smoke else (256, 263)
            engine_probe(size, batch, prompt, deadline, args.smoke, args.completion)
    finally:
        if args.work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"total {time.time() - start:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def parse_run(text: str, micro: int) -> tuple[str, int, int]:
    """``SCRIPT:B[:MICRO]`` as (script, rollout batch, micro-batch); the micro-batch is at most B."""
    parts = text.split(":")
    if parts[0] not in ("veritune", "compiled", "plain") or len(parts) not in (2, 3):
        raise SystemExit(f"--runs: expected SCRIPT:B[:MICRO] with SCRIPT veritune, compiled or plain, got {text!r}")
    batch = int(parts[1])
    return parts[0], batch, min(int(parts[2]) if len(parts) == 3 else micro, batch)


def sweep(runs, size, name, peak_flops, bandwidth, estimate, deadline, start, tmp_path, args, results) -> None:
    """Build the random model and the fixture, then one GRPO run per (script, B, micro) while the deadline allows."""
    width, height = (int(v) for v in args.image_size.split("x"))
    model = bg.build_real_size_model(size, tmp_path, "cpu" if args.smoke else "cuda")
    realistic_processor(model, 16384 if args.smoke else args.max_pixels, args.smoke)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    n_all = bg._count_parameters(config)
    text = config.text_config
    n_lm = n_all - sum(  # language model: all parameters less the vision tower
        p.numel() for p in _vision_parameters(config)
    )
    most = max(b for _, b, _ in runs)
    data, images = write_fixture(tmp_path / "data", max(16, 2 * most // GROUP), (width, height))
    paths = {"model": model, "data": data, "images": images, "tmp": tmp_path}
    print(
        f"GPU: {name}; model: random Qwen3-VL-{size.upper()} ({n_all / 1e9:.2f} B parameters, "
        f"{n_lm / 1e9:.2f} B language model); LoRA: {args.lora}; images {args.image_size}, "
        f"max_pixels {16384 if args.smoke else args.max_pixels}; completions of {args.completion} tokens; "
        f"{time.time() - start:.0f} s in"
    )
    read = n_lm - (0 if config.tie_word_embeddings else text.vocab_size * text.hidden_size)  # no embedding
    print(
        f"decode floor per step (bf16 weights read once at {bandwidth / 1e12:.2f} TB/s, KV cache not "
        f"counted): {2 * read / bandwidth * 1e3:.2f} ms"
    )
    columns = [
        "run",
        "B",
        "micro",
        "step (s)",
        "completion tok/s",
        "all tok/s",
        "rollout share",
        "gen tok/s",
        "ms/decode step",
        "MFU",
        "actor MFU",
        "mean length",
        "peak GiB",
        "wall (s)",
    ]
    print("| " + " | ".join(columns) + " |\n" + "| --- " * len(columns) + "|", flush=True)
    steps: dict[tuple[str, int, int], list[dict[str, float]]] = {}
    for script, batch, micro in runs:
        label = f"| {script} | {batch} | {micro} |"
        needed = estimate.get(batch, 90.0) + (args.compile_s if script == "compiled" else 0.0)
        left = deadline - time.time()
        if left < needed:
            print(f"{label} skipped: {left:.0f} s left, about {needed:.0f} needed |", flush=True)
            continue
        timeout = max(left - 5, 1) if left != float("inf") else None  # no --deadline-s: no limit
        try:
            r = run_one(script, batch, micro, paths, args, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{label} timed out at the deadline |", flush=True)
            continue
        results.setdefault(f"{script}:{batch}:{micro}", []).append(r)
        if "error" in r:
            print(f"{label} {r['error']} |", flush=True)
            continue
        completion = batch * r["mean_length"]
        train_s = r["step_time"] - r["rollout"]
        steps.setdefault((script, batch, micro), []).append(
            {
                "step": r["step_time"],
                "completion tokens/s": completion / r["step_time"],
                "all tokens/s": r["all_tokens"] / r["step_time"],
                "actor MFU": 100 * 6 * n_lm * r["all_tokens"] / train_s / peak_flops,
                "ms per decode step": 1000 * r["rollout"] / args.completion,
                "peak memory": r["peak_gib"],
            }
        )
        print(
            f"{label} {r['step_time']:.2f} | {completion / r['step_time']:,.0f} | "
            f"{r['all_tokens'] / r['step_time']:,.0f} | {r['rollout'] / r['step_time']:.0%} | "
            f"{completion / r['rollout']:,.0f} | {1000 * r['rollout'] / args.completion:.1f} | "
            f"{6 * n_all * completion / r['step_time'] / peak_flops:.1%} | "
            f"{6 * n_lm * r['all_tokens'] / train_s / peak_flops:.1%} | {r['mean_length']:.0f} | "
            f"{r['peak_gib']:.1f} | {r['wall']:.0f} |",
            flush=True,
        )
    if args.repeat > 1:
        print("\n| run | B | micro | min step (s) | median step (s) | measured |\n" + "| --- " * 6 + "|")
        for (script, batch, micro), measured in steps.items():
            times = [m["step"] for m in measured]
            print(
                f"| {script} | {batch} | {micro} | {min(times):.3f} | {statistics.median(times):.3f} | {len(times)} |"
            )
    print("\n" + figures_table(figure_rows(steps, size, args.lora)), flush=True)


UNITS = {
    "completion tokens/s": ("tokens/s", "higher"),
    "all tokens/s": ("tokens/s", "higher"),
    "actor MFU": ("%", "higher"),
    "ms per decode step": ("ms", "lower"),
    "peak memory": ("GiB", "lower"),
}


def figure_rows(steps: dict[tuple[str, int, int], list[dict[str, float]]], size: str, lora: bool) -> list[tuple]:
    """The figures table's rows (perf/figures.py): each run's medians, named by model, run, B and micro-batch
    (``2B full, veritune, B = 256, micro 8: completion tokens/s``), and veritune's step over plain TRL's at the
    same B and micro-batch."""
    model = f"{size.upper()} {'LoRA' if lora else 'full'}"
    rows = []
    for (script, batch, micro), measured in steps.items():
        name = f"{model}, {'compiled_decode' if script == 'compiled' else script}, B = {batch}, micro {micro}"
        for key, (unit, better) in UNITS.items():
            rows.append((f"{name}: {key}", statistics.median(m[key] for m in measured), unit, better))
        plain = steps.get(("plain", batch, micro))
        if script != "plain" and plain:
            ratio = statistics.median(m["step"] for m in measured) / statistics.median(m["step"] for m in plain)
            rows.append((f"{name}: step time over plain TRL's", ratio, "x", "lower"))
    return rows


def _vision_parameters(config: object):
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return list(model.model.visual.parameters())


if __name__ == "__main__":
    main()
