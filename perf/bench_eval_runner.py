"""Eval runner: batched generation vs a one-question-at-a-time ``generate`` loop on the same items.

    python perf/bench_eval_runner.py [--items 512] [--batch-size 32]

Same tiny Qwen3-VL, the same ORIC-Bench-style items (questions on generated images), greedy decoding;
the outputs of the two are asserted identical. Target: batched >= 5x the items/s of the loop.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from figures import figures_table  # perf/, this script's folder, is on the path

REPO_ROOT = Path(__file__).resolve().parent.parent


def make_items(tmp_path: Path, args: argparse.Namespace) -> list:
    """ORIC-Bench-style items: four paraphrased questions per generated COCO-sized JPEG."""
    from PIL import Image

    from data_builders.oric.questions import paraphrases
    from eval_hooks.base import EvalItem

    names = ["cup", "apple", "traffic light", "umbrella", "dog", "bench", "kite", "oven"]
    items = []
    for index in range(args.items):
        question_index, paraphrase = divmod(index, 4)  # four paraphrases per image, as in ORIC-Bench
        image = tmp_path / f"{question_index}.jpg"
        if not image.exists():  # COCO-sized JPEGs with some texture, so decoding costs what it costs on COCO
            noise = Image.effect_noise((args.image_width, args.image_height), 40 + question_index % 30).convert("RGB")
            noise.save(image, quality=90)
        question = paraphrases(names[question_index % len(names)])[paraphrase]
        items.append(EvalItem(id=str(index), prompt=question, images=[image], max_new_tokens=args.max_new_tokens))
    return items


def print_report(args: argparse.Namespace, answers: dict[str, dict[str, str]], seconds: dict[str, float]) -> int:
    """The items/s table of the four runners and the speed-ups; returns how many items all four answered alike."""
    single, batched, unsorted, uncached = (answers[k] for k in ("single", "batched", "unsorted", "uncached"))
    single_time, batched_time, unsorted_time, uncached_time = (
        seconds[k] for k in ("single", "batched", "unsorted", "uncached")
    )
    same = sum(single[k] == batched[k] == unsorted[k] == uncached[k] for k in single)
    n = len(single)
    print(
        f"{n} items, {n // 4} images of {args.image_width}x{args.image_height} (four questions each), "
        f"batch {args.batch_size}, "
        f"{args.max_new_tokens} new tokens\n"
    )
    print(f"| runner | items/s |\n| --- | --- |\n| one at a time | {n / single_time:.1f} |")
    print(f"| batched, file order, no image cache (before the length sort) | {n / unsorted_time:.1f} |")
    print(f"| batched, sorted by length, no image cache (before the cache) | {n / uncached_time:.1f} |")
    print(f"| batched, sorted by length, decoded images cached | {n / batched_time:.1f} |")
    print(
        f"\nspeed-up: {single_time / batched_time:.1f}x (target >= 5x); "
        f"length sort alone: {unsorted_time / uncached_time:.2f}x; "
        f"image cache alone: {uncached_time / batched_time:.2f}x; identical outputs (all four): {same}/{n}"
    )
    figures = [
        ("one at a time", n / single_time, "items/s", "higher"),
        ("batched, sorted by length, decoded images cached", n / batched_time, "items/s", "higher"),
        ("speed-up batched / one at a time", single_time / batched_time, "x", "higher"),
    ]
    print("\n" + figures_table(figures))
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--image-width", type=int, default=640, help="COCO val2014 images are mostly 640x480")
    parser.add_argument("--image-height", type=int, default=480)
    args = parser.parse_args()

    import torch

    from core.images import _decoded
    from eval_hooks.runner import TransformersBackend, generate_batch, load_model, run_items
    from miniature.tiny.models import build_tiny_model

    torch.set_num_threads(2)
    answers: dict[str, dict[str, str]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model, processor = load_model(build_tiny_model("qwen3vl", tmp_path / "model"), "float32")
        items = make_items(tmp_path, args)

        def timed(name: str, run: Callable[[], dict[str, str]]) -> None:
            _decoded.cache_clear()
            start = time.perf_counter()
            answers[name] = run()
            seconds[name] = time.perf_counter() - start

        timed("single", lambda: {item.id: generate_batch(model, processor, [item])[0] for item in items})
        plain = TransformersBackend(model, processor, image_cache=False)
        cached = TransformersBackend(model, processor)
        timed(
            "unsorted",
            lambda: run_items(
                plain,
                items,
                tmp_path / "unsorted.jsonl",
                batch_size=args.batch_size,
                desc="batched, file order, no image cache",
                sort_by_length=False,
            ),
        )
        timed(
            "uncached",
            lambda: run_items(
                plain,
                items,
                tmp_path / "uncached.jsonl",
                batch_size=args.batch_size,
                desc="batched, sorted, no image cache",
            ),
        )
        timed(
            "batched",
            lambda: run_items(
                cached, items, tmp_path / "predictions.jsonl", batch_size=args.batch_size, desc="batched"
            ),
        )

    if print_report(args, answers, seconds) != len(items):
        sys.exit("batched outputs differ from one-at-a-time outputs")


if __name__ == "__main__":
    main()
