"""ORIC builder throughput.

    python benchmarks/bench_oric_builder.py [--images 82783]

1. Model-free stages on a generated COCO-2014-train-scale annotation file (82,783 images, ~600,000
   boxes, 80 classes): load, ROI split with exact box unions, the co-occurrence judge, question
   composition and writing. Target: within 60 s on a 2-core machine, peak RSS under 4 GiB.
2. CLIP image embedding throughput with the tiny offline CLIP (images/s at the batch size shown).
3. The `openai` judge against a local chat-completions server: requests/s at the chosen concurrency.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def model_free(images: int, tmp: Path) -> None:
    from data_builders.oric.annotations import describe, load_instances, roi_split
    from data_builders.oric.judges import CooccurrenceJudge
    from data_builders.oric.questions import paraphrases, r1_prompt
    from data_builders.synthetic_world import generate_coco_scale_annotations
    from veritune.io import atomic_write_json

    path = generate_coco_scale_annotations(tmp / "instances.json", num_images=images)
    timings = {}
    start = time.perf_counter()
    records, names = load_instances(path)
    timings["load (pycocotools)"] = time.perf_counter() - start
    boxes = sum(len(b) for r in records for b in r.boxes.values())

    start = time.perf_counter()
    splits = {}
    for record in records:
        if len(record.boxes) >= 2:
            splits[record.image_id] = roi_split(describe(record))
    timings["ROI split (exact unions)"] = time.perf_counter() - start

    start = time.perf_counter()
    judge = CooccurrenceJudge(records, threshold=0.25)
    queries = [(non_roi, name, image_id) for image_id, (roi, non_roi) in splits.items() for name in roi]
    verdicts = judge(queries)
    timings["co-occurrence judge"] = time.perf_counter() - start

    start = time.perf_counter()
    rng = random.Random(0)
    candidates = [q for q, v in zip(queries, verdicts) if v == "no"]
    chosen = rng.sample(candidates, min(2000, len(candidates)))
    items = [{"id": i + 1, "image": f"{q[2]}.jpg", "target_object": q[1], "problem": r1_prompt(q[1]), "solution": "<SOLUTION>yes</SOLUTION>",
              "paraphrases": paraphrases(q[1])} for i, q in enumerate(chosen)]  # fmt: skip
    atomic_write_json(tmp / "oric_train.json", items, indent=4)
    timings["questions + writing"] = time.perf_counter() - start

    total = sum(timings.values())
    print(f"COCO-scale annotations: {len(records):,} images, {boxes:,} boxes, {len(names)} classes; {len(queries):,} judge queries")
    print("| stage | seconds |\n| --- | --- |")
    for stage, seconds in timings.items():
        print(f"| {stage} | {seconds:.1f} |")
    print(f"| **all model-free stages** | **{total:.1f}** (target <= 60) |")
    print(f"peak RSS: {peak_rss_gib():.2f} GiB (target < 4)")


def clip_throughput(tmp: Path, count: int = 256, batch_size: int = 64) -> None:
    from PIL import Image

    from data_builders.oric.clip_negatives import ClipScorer
    from veritune.tiny_clip import build_tiny_clip

    paths = []
    for index in range(count):
        path = tmp / f"img{index}.jpg"
        Image.new("RGB", (640, 480), (index % 255, 80, 160)).save(path)
        paths.append(path)
    scorer = ClipScorer(str(build_tiny_clip(tmp / "clip")), cache_dir=None, batch_size=batch_size)
    start = time.perf_counter()
    scorer.embed_images(paths)
    elapsed = time.perf_counter() - start
    print(f"CLIP image embedding (tiny encoder, 640x480 JPEGs, batch {batch_size}): {count / elapsed:.0f} images/s")


def judge_throughput(tmp: Path, requests: int = 400, concurrency: int = 8) -> None:
    from fake_openai_server import FakeChatServer

    from data_builders.llm_client import ChatClient

    with FakeChatServer(lambda request: "no") as server:
        client = ChatClient(server.base_url, "judge", cache_path=tmp / "cache.sqlite", concurrency=concurrency)
        start = time.perf_counter()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge")
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge (cached)")
        cached = time.perf_counter() - start
    print(f"openai judge vs local server (concurrency {concurrency}): {requests / elapsed:.0f} requests/s; "
          f"{1000 / (requests / elapsed):.1f} s per 1,000 images at one query each; rerun from cache: {requests / cached:,.0f} answers/s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=82783)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_free(args.images, Path(tmp))
        clip_throughput(Path(tmp))
        judge_throughput(Path(tmp))


if __name__ == "__main__":
    main()
