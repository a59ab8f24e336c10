"""Run every performance benchmark, print each one's figures, and write ``docs/PERFORMANCE.md``.

    make bench            # or: python perf/run_all.py [--only NAME ...]

Each benchmark is a standalone script in this folder that prints its own figures; this runner records
them with the machine, the date and the exact command, so every figure in PERFORMANCE.md can be
reproduced. Ratios are measured in one run; absolute times hold for the machine named.

A benchmark that ends its output with a figures table (``perf/figures.py``) has each of its figures printed
again beside the one recorded last time in PERFORMANCE.md, with the ratio new / recorded and ``REGRESSION``
where it got more than 20% worse, so a slowdown stands out when anyone runs it (no timed test asserts it).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RECORD = REPO_ROOT / "docs" / "PERFORMANCE.md"  # the figures recorded last time
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import compare, parse_figures  # noqa: E402  (perf/ is a folder of scripts, not a package)

# What a benchmark prints first when this machine cannot measure it (no GPU): its recorded section is kept.
SKIPPED = "GPU section skipped"

# (name, script and arguments, what it measures)
BENCHMARKS: list[tuple[str, list[str], str]] = [
    ("rewards", ["perf/bench_rewards.py"], "ORIC reward throughput"),
    (
        "wrapper_overhead",
        ["perf/bench_wrapper_overhead.py"],
        "finetune/grpo.py and finetune/dpo.py vs plain TRL, same tiny configurations (7.1)",
    ),
    ("oric_builder", ["perf/bench_oric_builder.py"], "ORIC builder on COCO-scale annotations, CLIP, judge (7.2)"),
    (
        "io",
        ["perf/bench_io.py"],
        "core/io.py's record encoder and gc.freeze in the ORIC builder's model-free stages, against json.dumps and "
        "the collector paused for the load only or untouched",
    ),
    ("finer_builder", ["perf/bench_finer_builder.py"], "FINER scene-graph path throughput (7.2)"),
    ("eval_runner", ["perf/bench_eval_runner.py"], "batched vs one-at-a-time evaluation (7.3)"),
    ("answer_extraction", ["perf/bench_answer_extraction.py"], "answer extraction cost (7.3)"),
    (
        "bootstrap",
        ["perf/bench_bootstrap.py"],
        "the before/after rows' paired bootstrap at the demo's sizes: summed per-unit tallies vs scoring each draw",
    ),
    (
        "cpu_training",
        ["perf/bench_cpu_training.py"],
        "miniature CPU training: GRPO bf16 vs fp32, SFT data worker, M-RoPE ids from the collator, LM head on the "
        "labelled positions, a frozen vision tower's features cached (SFT and DPO), DPO's reference in the step (one "
        "torch thread, two) or in the data worker",
    ),
    (
        "cpu_optimizer",
        ["perf/bench_cpu_optimizer.py"],
        "the FINER chain's warm-start and DPO with torch's AdamW as a per-tensor loop (its CPU default) or in its "
        "multi-tensor kernels (the foreach_adamw plugin); the trained weights compared byte for byte",
    ),
    (
        "dynamic_sampling",
        ["perf/bench_dynamic_sampling.py"],
        "GRPO with and without DAPO's dynamic sampling: seconds and completions per step, informative groups per "
        "second",
    ),
    (
        "gpu",
        ["perf/bench_gpu.py"],
        "real-size GRPO step on a GPU with transformers and with colocated vLLM generation, a LoRA DPO step, "
        "eval run on both backends (7.5)",
    ),
    (
        "rollout",
        ["perf/bench_rollout.py"],
        "GRPO step at rollout batches of 8 to 256 completions with Qwen3-VL's real pixel budget: veritune, its "
        "compiled decode and plain TRL, micro-batches",
    ),
    (
        "cli_help",
        ["perf/bench_cli_help.py"],
        "`veritune --help` start-up time: commands are imported only when they run",
    ),
]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{mem_kib / 2**20:.0f} GiB"
    except OSError:
        memory = "unknown memory"
    return f"{os.cpu_count()} CPU cores ({cpu}), {memory}, Python {platform.python_version()}, {platform.system()}"


def previous_sections(text: str) -> dict[str, str]:
    """``{benchmark name: its section}`` of an existing PERFORMANCE.md written by this script."""
    names = {name for name, _, _ in BENCHMARKS}
    sections: dict[str, str] = {}
    for chunk in text.split("\n## ")[1:]:
        name = chunk.split("\n", 1)[0].strip()
        if name in names:
            sections[name] = "## " + chunk.rstrip("\n") + "\n"
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args()

    # the caller's PYTHONPATH after the repository's (e.g. where shapely is, for the official ORIC side)
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    sections: dict[str, str] = {}
    recorded = previous_sections(args.out.read_text()) if args.out.is_file() else {}
    if args.only:  # keep the other benchmarks' sections (with their own dates)
        sections = dict(recorded)
    # figures are compared with the repository's record, also when --out writes elsewhere
    baseline = previous_sections(RECORD.read_text()) if RECORD.is_file() else {}
    regressions = []
    for name, command, what in BENCHMARKS:
        if args.only and name not in args.only:
            continue
        shown = "python " + " ".join(command)
        print(f"\n## {name}: {what}\n$ {shown}", flush=True)
        start = time.monotonic()
        result = subprocess.run([sys.executable, *command], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        # DeepSpeed announces on import that it picked the CPU accelerator: noise, not a figure
        output = (
            "\n".join(line for line in result.stdout.splitlines() if "real_accelerator.py" not in line).strip()
            or "(no output)"
        )
        if result.returncode != 0:
            output += f"\n\nFAILED (exit {result.returncode}):\n" + result.stderr.strip()[-2000:]
        print(output, flush=True)
        if output.startswith(SKIPPED) and name in recorded:  # no GPU here: keep the figures a GPU recorded
            print(f"(kept the section recorded in {args.out.name}: this machine cannot measure it)", flush=True)
            sections[name] = recorded[name]
            continue
        figures = parse_figures(output)
        if figures:
            lines = compare(figures, parse_figures(baseline.get(name, "")))
            print("\nagainst the figures recorded in PERFORMANCE.md:\n" + "\n".join(lines), flush=True)
            regressions += [f"{name}: {line}" for line in lines if "REGRESSION" in line]
        today = datetime.date.today().isoformat()
        sections[name] = (
            f"## {name}\n\n{what}. Command: `{shown}` ({time.monotonic() - start:.0f} s, {today})\n\n{output}\n"
        )

    header = (
        "# Performance\n\n"
        "Written by `make bench` (`python perf/run_all.py`). Every figure below was printed by the command\n"
        "shown beside it, in one run, on this machine:\n\n"
        f"- machine: {machine()}\n- date: {datetime.date.today().isoformat()}\n\n"
        "Ratios are measured side by side in the same run; absolute times hold only for this machine. A section\n"
        "rerun alone (`--only NAME`) carries its own date.\n\n"
        "A section that ends with a figures table (`| figure | value | unit | better |`, printed by the benchmark\n"
        "through `perf/figures.py`) is what the next `make bench` compares with: it prints each new figure beside\n"
        "the one recorded here, with the ratio new / recorded, and `REGRESSION` where a figure is more than 20%\n"
        "worse (a time-like figure, `better` = lower, whose ratio is above 1.2; a throughput, higher, below 1/1.2).\n"
        "The machine is shared: a regression is confirmed by rerunning the old and the new code alternately.\n\n"
    )
    order = [name for name, _, _ in BENCHMARKS]
    args.out.write_text(header + "\n".join(sections[name] for name in sorted(sections, key=order.index)))
    print(f"\nwritten: {args.out}")
    if regressions:
        print(f"\n{len(regressions)} REGRESSION(S), more than 20% worse than recorded:\n" + "\n".join(regressions))


if __name__ == "__main__":
    main()
