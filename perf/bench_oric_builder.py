"""ORIC builder throughput.

    python perf/bench_oric_builder.py [--images 82783]

1. Model-free stages on a generated COCO-2014-train-scale annotation file (82,783 images, ~600,000
   boxes, 80 classes), with the builder's own functions: load and validation, ROI split with exact box
   unions and the co-occurrence judge over every image (a build stops once its counts are met, so this
   is the worst case), question composition and writing. Target: within 60 s on a 2-core machine, peak
   RSS under 4 GiB.
2. The exact most-similar-image search at that scale (random 512-d unit embeddings).
3. CLIP image embedding throughput with the tiny offline CLIP (images/s at the batch size shown).
4. The `openai` judge against a local chat-completions server: requests/s at the chosen concurrency, and
   the cost per 1,000 query images at the measured number of ROI queries per image.
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


def model_free(images: int, tmp: Path) -> float:
    """Time the builder's own model-free code on every image; return judge queries per query image."""
    from data_builders.oric.annotations import load_instances
    from data_builders.oric.build import BuildStats, judge_roi_objects, oric_item
    from data_builders.oric.judges import CooccurrenceJudge
    from data_builders.synthetic_world import generate_coco_scale_annotations
    from veritune.core.io import atomic_write_json

    path = generate_coco_scale_annotations(tmp / "instances.json", num_images=images)
    timings = {}
    start = time.perf_counter()
    records, names = load_instances(path)
    timings["load + validate (pycocotools)"] = time.perf_counter() - start
    boxes = sum(len(b) for r in records for b in r.boxes.values())
    queries = [r for r in records if len(r.boxes) >= 2]

    start = time.perf_counter()
    judge = CooccurrenceJudge(records, threshold=0.25)
    timings["co-occurrence statistics"] = time.perf_counter() - start

    # ROI split (exact unions) and the judge, chunk by chunk as build_items does, over every image
    start = time.perf_counter()
    stats = BuildStats()
    verdicts = {}
    for begin in range(0, len(queries), 256):
        verdicts.update(judge_roi_objects(queries[begin : begin + 256], judge, stats))
    timings["ROI split + co-occurrence judge (all images)"] = time.perf_counter() - start
    asked = sum(stats.judge_answers.values())

    start = time.perf_counter()
    rng = random.Random(0)
    by_id = {r.image_id: r for r in records}
    items = []
    for image_id, (candidates, areas) in verdicts.items():
        for name in rng.sample(candidates, min(2, len(candidates))):
            items.append(
                oric_item(
                    "bench",
                    by_id[image_id],
                    by_id[image_id],
                    name,
                    "yes",
                    roi_area=areas[name],
                    verdict="no",
                    similarity=1.0,
                )
            )
    for number, item in enumerate(items, start=1):
        item["id"] = number
    atomic_write_json(tmp / "oric_bench.json", items, indent=4)
    timings[f"compose + write {len(items):,} questions"] = time.perf_counter() - start

    total = sum(timings.values())
    print(
        f"COCO-scale annotations: {len(records):,} images, {boxes:,} boxes, {len(names)} classes; "
        f"{len(queries):,} images with >= 2 classes; {asked:,} judge queries ({asked / len(queries):.2f} per image)"
    )
    print("| stage | seconds |\n| --- | --- |")
    for stage, seconds in timings.items():
        print(f"| {stage} | {seconds:.1f} |")
    print(f"| **all model-free stages** | **{total:.1f}** (target <= 60) |")
    print(f"peak RSS: {peak_rss_gib():.2f} GiB (target < 4)")
    return asked / len(queries)


def neighbour_search(images: int, queries: int = 1024, dim: int = 512) -> None:
    """Exact most-similar-image search (Alg. 2, step 1) on random unit embeddings of CLIP ViT-B/32's size."""
    import numpy as np

    from data_builders.oric.clip_negatives import most_similar

    embeddings = np.random.default_rng(0).normal(size=(images, dim)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    start = time.perf_counter()
    most_similar(embeddings, list(range(queries)))
    elapsed = time.perf_counter() - start
    print(
        f"exact neighbour search ({dim}-d, {images:,} candidates): {queries / elapsed:,.0f} query images/s "
        f"({queries:,} in {elapsed:.2f} s; the builder searches only the query images it visits)"
    )


def clip_throughput(tmp: Path, count: int = 256, batch_size: int = 64) -> None:
    import numpy as np
    from PIL import Image

    from data_builders.oric.clip_negatives import ClipScorer
    from veritune.tiny.clip import build_tiny_clip

    # Photo-like JPEGs of COCO's size and byte count (~100-200 KB): smooth noise, so decoding costs what it
    # does on COCO.
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = tmp / f"img{index}.jpg"
        coarse = Image.fromarray(rng.integers(0, 256, size=(60, 80, 3), dtype=np.uint8)).resize(
            (640, 480), Image.BICUBIC
        )
        fine = Image.fromarray(rng.integers(0, 40, size=(480, 640, 3), dtype=np.uint8))
        Image.fromarray(np.asarray(coarse, dtype=np.uint8) // 2 + np.asarray(fine)).save(path, quality=85)
        paths.append(path)
    size_kb = sum(p.stat().st_size for p in paths) / len(paths) / 1024
    scorer = ClipScorer(str(build_tiny_clip(tmp / "clip")), cache_dir=None, batch_size=batch_size)
    start = time.perf_counter()
    scorer.embed_images(paths)
    elapsed = time.perf_counter() - start
    print(
        f"CLIP image embedding (tiny encoder, {count} 640x480 JPEGs of {size_kb:.0f} KB, batch {batch_size}, "
        f"decoding overlapped): {count / elapsed:.0f} images/s"
    )


def judge_throughput(tmp: Path, queries_per_image: float, requests: int = 400, concurrency: int = 8) -> None:
    from fake_openai_server import FakeChatServer

    from veritune.core.llm_client import ChatClient

    with FakeChatServer(lambda request: "no") as server:
        client = ChatClient(server.base_url, "judge", cache_path=tmp / "cache.sqlite", concurrency=concurrency)
        start = time.perf_counter()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge")
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge (cached)")
        cached = time.perf_counter() - start
    rate = requests / elapsed
    print(
        f"openai judge vs local server (concurrency {concurrency}): {rate:.0f} requests/s; "
        f"{1000 * queries_per_image / rate:.1f} s per 1,000 query images ({queries_per_image:.2f} ROI queries each; "
        "client and cache overhead only, the model's latency comes on top); "
        f"rerun from cache: {requests / cached:,.0f} answers/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=82783)
    parser.add_argument("--batch-size", type=int, default=64, help="CLIP embedding batch size")
    parser.add_argument("--concurrency", type=int, default=8, help="openai judge requests in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        queries_per_image = model_free(args.images, Path(tmp))
        neighbour_search(args.images)
        clip_throughput(Path(tmp), batch_size=args.batch_size)
        judge_throughput(Path(tmp), queries_per_image, concurrency=args.concurrency)


if __name__ == "__main__":
    main()
