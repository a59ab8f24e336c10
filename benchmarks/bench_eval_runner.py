"""Eval runner: batched generation vs a one-question-at-a-time ``generate`` loop on the same items.

    python benchmarks/bench_eval_runner.py [--items 512] [--batch-size 32]

Same tiny Qwen3-VL, the same ORIC-Bench-style items (questions on generated images), greedy decoding;
the outputs of the two are asserted identical. Target: batched >= 5x the items/s of the loop.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()

    import torch
    from PIL import Image

    from data_builders.oric.questions import paraphrases
    from eval_hooks.base import EvalItem
    from eval_hooks.runner import generate_batch, load_model, run_items
    from veritune.tiny_models import build_tiny_model

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model, processor = load_model(build_tiny_model("qwen3vl", tmp_path / "model"), "float32")
        names = ["cup", "apple", "traffic light", "umbrella", "dog", "bench", "kite", "oven"]
        items = []
        for index in range(args.items):
            image = tmp_path / f"{index % 64}.jpg"
            if not image.exists():
                Image.new("RGB", (96 + index % 64, 80), (index * 7 % 255, 90, 140)).save(image)
            question = paraphrases(names[index % len(names)])[index % 4]
            items.append(EvalItem(id=str(index), prompt=question, images=[image], max_new_tokens=args.max_new_tokens))

        start = time.perf_counter()
        single = {item.id: generate_batch(model, processor, [item])[0] for item in items}
        single_time = time.perf_counter() - start

        start = time.perf_counter()
        unsorted = run_items(model, processor, items, tmp_path / "unsorted.jsonl", batch_size=args.batch_size, desc="batched, file order",
                             sort_by_length=False)  # fmt: skip
        unsorted_time = time.perf_counter() - start

        start = time.perf_counter()
        batched = run_items(model, processor, items, tmp_path / "predictions.jsonl", batch_size=args.batch_size, desc="batched")
        batched_time = time.perf_counter() - start

    same = sum(single[k] == batched[k] == unsorted[k] for k in single)
    print(f"| runner | items/s |\n| --- | --- |\n| one at a time | {len(items) / single_time:.1f} |")
    print(f"| batched (batch {args.batch_size}, file order: before the length sort) | {len(items) / unsorted_time:.1f} |")
    print(f"| batched (batch {args.batch_size}, sorted by length) | {len(items) / batched_time:.1f} |")
    print(f"\nspeed-up: {single_time / batched_time:.1f}x (target >= 5x); length sort alone: {unsorted_time / batched_time:.2f}x; "
          f"identical outputs (all three): {same}/{len(items)}")  # fmt: skip
    if same != len(items):
        sys.exit("batched outputs differ from one-at-a-time outputs")


if __name__ == "__main__":
    main()
