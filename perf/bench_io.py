"""What ``core/io.py``'s two speed-ups give ``veritune build oric``: its record encoder (``json_chunks``, the
questions file laid out column by column) against ``json.dumps(indent=4)``, and ``gc_paused(keep=True)``
(the loaded annotations frozen out of the collector's walks, ``gc.freeze``) against the collector paused only
while they load (``keep=False``) and against no pause at all.

    python perf/bench_io.py [--images 82783] [--rounds 3]

Each run is the ORIC builder's model-free stages on a generated COCO-2014-train-scale annotation file (load,
candidate images, co-occurrence statistics, ROI split + judge + compose, write questions: the veritune side of
``perf/bench_oric_builder.py``), in a fresh process with one thread, the sides interleaved (their order
rotated each round). Prints min and median wall-clock and CPU seconds per stage and side, the ratios of each
side to the library's own (min and median), and whether every side wrote the same questions file (sha256).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "perf"))

from bench_oric_builder import LOAD, STAGES, WRITE, veritune_side  # noqa: E402  (perf/ is a folder of scripts)
from figures import figures_table  # noqa: E402

# side -> (encoder, collector around the load); the first is the library's own: the records encoder, the
# annotations frozen; "gc-pause": the collector paused while they load only; "gc-untouched": no pause
SIDES = {
    "library": ("records", "freeze"),
    "json.dumps": ("stdlib", "freeze"),
    "gc-pause": ("records", "pause"),
    "gc-untouched": ("records", "none"),
    "json.dumps+gc-untouched": ("stdlib", "none"),
}
OURS = next(iter(SIDES))


def use_side(encoder: str, collector: str) -> None:
    """Swap the builder's encoder and its collector handling in this process for the side's."""
    import core.io
    import data_builders.oric.annotations

    if encoder == "stdlib":
        core.io.json_chunks = lambda data, indent=2, records_per_chunk=2048: iter(
            (json.dumps(data, indent=indent, ensure_ascii=False),)
        )
    if collector == "pause":
        data_builders.oric.annotations.gc_paused = lambda keep=False: core.io.gc_paused(keep=False)
    elif collector == "none":
        data_builders.oric.annotations.gc_paused = lambda keep=False: contextlib.nullcontext()


def run_side(side: str, path: Path, tmp: Path) -> dict:
    """One side in a fresh process (one thread): its stages' seconds and its output's sha256."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    encoder, collector = SIDES[side]
    command = [sys.executable, __file__, "--side", encoder, collector, "--annotations", str(path)]
    command += ["--out", str(tmp / "questions.json")]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{side} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=82783, help="images of the generated annotation file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", nargs="+", choices=list(SIDES)[1:], help="compare only these with the library")
    parser.add_argument("--side", nargs=2, metavar=("ENCODER", "COLLECTOR"), help=argparse.SUPPRESS)
    parser.add_argument("--annotations", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # one side's run, in its own process
        import torch

        torch.set_num_threads(1)
        use_side(*args.side)
        print(json.dumps(veritune_side(args.annotations, args.out, check=False)))
        return

    from miniature.world import generate_coco_scale_annotations

    sides = [OURS, *(args.sides or list(SIDES)[1:])]
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        path = generate_coco_scale_annotations(Path(tmp) / "instances.json", num_images=args.images)
        names = sides
        for index in range(args.rounds):
            for side in names[index % len(names) :] + names[: index % len(names)]:  # order rotated each round
                runs[side].append(run_side(side, path, Path(tmp)))
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    def seconds(side: str, stage: str | None, clock: str = "timings") -> list[float]:
        return [sum(r[clock].values()) if stage is None else r[clock][stage] for r in runs[side]]

    first = runs[OURS][0]
    outputs = {r["output_sha256"] for side in sides for r in runs[side]}
    print(
        f"COCO-scale annotations: {first['images']:,} images, {first['boxes']:,} boxes; {first['questions']:,} "
        f"question records written (indent 4); {args.rounds} runs per side, interleaved, one thread; the same "
        f"questions file from every run: {'yes' if len(outputs) == 1 else 'NO'} ({next(iter(outputs))[:16]}...)\n"
    )
    figures = []
    for clock, what in (("timings", "wall-clock seconds"), ("cpu", "CPU seconds (user + system, the side's process)")):
        print(f"{what}, min / median:")
        print("| side | " + " | ".join(STAGES) + " | all |\n| --- |" + " --- |" * (len(STAGES) + 1))
        for side in sides:
            cells = [
                f"{min(seconds(side, s, clock)):.2f} / {statistics.median(seconds(side, s, clock)):.2f}"
                for s in (*STAGES, None)
            ]
            print(f"| {side} | " + " | ".join(cells) + " |")
        print(f"\n{what}, ratio to the library's own, min / median:")
        print(f"| side | {LOAD} | {WRITE} | all |\n| --- | --- | --- | --- |")
        for side in sides[1:]:
            cells = []
            for stage in (LOAD, WRITE, None):
                ours, theirs = seconds(OURS, stage, clock), seconds(side, stage, clock)
                low, mid = min(theirs) / min(ours), statistics.median(theirs) / statistics.median(ours)
                cells.append(f"{low:.2f} / {mid:.2f}")
                if stage is None:
                    unit = "wall" if clock == "timings" else "CPU"
                    figures.append((f"model-free build {unit} time, {side} / library (median)", mid, "x", "higher"))
            print(f"| {side} | " + " | ".join(cells) + " |")
        print()
    figures.append(("model-free build, library (median)", statistics.median(seconds(OURS, None)), "s", "lower"))
    print(figures_table(figures))


if __name__ == "__main__":
    main()
