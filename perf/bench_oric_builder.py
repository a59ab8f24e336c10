"""ORIC builder throughput.

    python perf/bench_oric_builder.py [--images 82783] [--rounds 3]

1. Model-free stages on a generated COCO-2014-train-scale annotation file (82,783 images, ~600,000
   boxes, 80 classes), the official ORIC code's against veritune's, run alternately (each run in a fresh
   process, one thread) and reported as min and median per side with their ratio (target: veritune at most
   0.3x the official time). Both sides judge every query image with the same co-occurrence judge
   (the official code asks an LLM, a model, which is not timed here) and write the "yes" questions of the
   same images; a build stops once its counts are met, so this is the worst case. Peak RSS of veritune's
   side: target under 4 GiB.
2. The exact most-similar-image search at that scale (random 512-d unit embeddings).
3. CLIP image embedding throughput with the tiny offline CLIP (images/s at the batch size shown).
4. The `openai` judge against a local chat-completions server: requests/s at the chosen concurrency, and
   the cost per 1,000 query images at the measured number of ROI queries per image.

The official side restates, step for step and in our own code, the model-free part of the public ORIC
builder (ZhaoyangLi-1/ORIC @ daadabe, ``utils/oric.py``): ``COCO(path)`` and ``ORIC.extract_images`` (per
image ``loadAnns(getAnnIds(...))``, ``loadImgs``, ``category_name``), ``ORIC._classify_by_area`` (the union
area of each class's boxes with shapely's ``unary_union``, split at ``np.median``), the judge loop of
``construct_positive_questions`` (the prompt formatted per target object, stopping at ``num_targets``
"no" answers), the four paraphrases and ``extract_QA``'s records, and ``json.dump(..., indent=4)``. Without
shapely installed (it is not a veritune dependency), the union areas come from a plain exact sweep
(``sweep_union_area``) instead, and the output says so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

from figures import figures_table  # noqa: E402  (perf/, this script's folder, is on the path)

STAGES = LOAD, COOCCURRENCE, ROI, WRITE = (
    "load + validate",
    "co-occurrence statistics",
    "ROI split + judge + compose",
    "write questions",
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def veritune_side(path: Path, out: Path) -> dict:
    """veritune's model-free stages, with the builder's own functions: seconds per stage and counts."""
    from data_builders.oric.annotations import load_instances
    from data_builders.oric.build import (
        JUDGE_CHUNK,
        BuildSettings,
        BuildStats,
        judge_roi_objects,
        pair_items,
        write_outputs,
    )
    from data_builders.oric.judges import CooccurrenceJudge

    timings = {}
    start = time.perf_counter()
    records, names = load_instances(path)
    timings[LOAD] = time.perf_counter() - start
    queries = [r for r in records if len(r.boxes) >= 2]

    start = time.perf_counter()
    judge = CooccurrenceJudge(records, threshold=0.25)
    timings[COOCCURRENCE] = time.perf_counter() - start

    # ROI split (exact unions) and the judge chunk by chunk as build_items does, then each query image's yes
    # questions (pair_items, the image standing for its own similar image: no CLIP here)
    start = time.perf_counter()
    stats = BuildStats()
    rng = random.Random(0)
    items = []
    for begin in range(0, len(queries), JUDGE_CHUNK):
        chunk = queries[begin : begin + JUDGE_CHUNK]
        verdicts = judge_roi_objects(chunk, judge, stats)
        for record in chunk:
            candidates, areas = verdicts[record.image_id]
            if len(candidates) >= 2:
                positives = [(record, name) for name in rng.sample(candidates, 2)]
                items += pair_items("bench", record, record, positives, [], areas, {}, 1.0)
    for number, item in enumerate(items, start=1):
        item["id"] = number
    timings[ROI] = time.perf_counter() - start

    start = time.perf_counter()
    settings = BuildSettings("bench", len(items), 0)
    write_outputs(
        items,
        out,
        annotations=path,
        image_root=path.parent,
        settings=settings,
        stats=stats,
        judge=judge,
        clip_model="none",
    )
    timings[WRITE] = time.perf_counter() - start
    boxes = sum(len(b) for r in records for b in r.boxes.values())
    return {
        "timings": timings,
        "images": len(records),
        "boxes": boxes,
        "classes": len(names),
        "queries": len(queries),
        "judged": sum(stats.judge_answers.values()),
        "questions": len(items),
        "question_images": len({item["image"] for item in items}),
        "peak_rss_gib": peak_rss_gib(),
    }


def sweep_union_area(boxes: list[list[float]]) -> float:
    """Exact area of a union of ``[x, y, w, h]`` boxes by a plain sweep over x: the official side's union
    when shapely is not installed (kept here as written, so that it does not speed up with veritune's)."""
    xs = sorted({b[0] for b in boxes} | {b[0] + b[2] for b in boxes})
    area = 0.0
    for left, right in zip(xs, xs[1:]):
        spans = sorted((b[1], b[1] + b[3]) for b in boxes if b[0] <= left and b[0] + b[2] >= right)
        covered, end = 0.0, float("-inf")
        for low, high in spans:
            if high <= end:
                continue
            covered += high - max(low, end)
            end = high
        area += covered * (right - left)
    return area


def official_side(path: Path, out: Path) -> dict:
    """The official ORIC code's model-free stages (module docstring), restated: seconds per stage and counts."""
    from types import SimpleNamespace

    import numpy as np
    from pycocotools.coco import COCO

    from data_builders.oric.judges import JUDGE_PROMPT, CooccurrenceJudge
    from data_builders.oric.questions import PARAPHRASES

    try:
        from shapely.geometry import Polygon
        from shapely.ops import unary_union

        def union_area(bboxes: list) -> float:
            return unary_union(
                [Polygon([(x, y), (x + w, y), (x + w, y + h), (x, y + h)]) for x, y, w, h in bboxes]
            ).area

        unions = "shapely"
    except ImportError:
        union_area = sweep_union_area
        unions = "an exact sweep over x (shapely not installed)"

    timings = {}
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(path))
    sampled = []
    for img_id in coco.getImgIds():
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img_id]))
        if len({a["category_id"] for a in anns}) < 2:
            continue
        info = coco.loadImgs([img_id])[0]
        for a in anns:
            a["category_name"] = coco.cats[a["category_id"]]["name"]
        sampled.append({"image_id": img_id, "image_info": info, "image_path": info["file_name"], "annotations": anns})
    timings[LOAD] = time.perf_counter() - start

    # the judge that stands in for the official LLM, built untimed from the same annotations
    names = {cat_id: cat["name"] for cat_id, cat in coco.cats.items()}
    judge = CooccurrenceJudge(
        [
            SimpleNamespace(image_id=i, boxes={names[a["category_id"]]: None for a in coco.imgToAnns.get(i, [])})
            for i in coco.getImgIds()
        ]
    )

    start = time.perf_counter()
    out_items, qid, judged = [], 1, 0
    for pair in sampled:
        width, height = pair["image_info"]["width"], pair["image_info"]["height"]
        total = width * height
        by_cat: dict = {}
        for a in pair["annotations"]:
            by_cat.setdefault(a["category_name"], []).append(a["bbox"])
        ratios = {c: union_area(bs) / total for c, bs in by_cat.items()}
        med = np.median(list(ratios.values()))
        background = [c for c, r in ratios.items() if r >= med]
        targets = [c for c, r in ratios.items() if r < med]
        if not background or not targets:
            continue
        final = []
        for obj in targets:
            JUDGE_PROMPT.format(background=f"[{','.join(background)}]", target=obj)
            judged += 1
            if judge([(background, obj, pair["image_id"])])[0] == "no":
                final.append(obj)
            if len(final) >= 2:
                break
        if len(final) < 2:
            continue
        for obj in final:
            texts = [t.format(object=obj if obj[0] not in "aeiouAEIOU" else f"an {obj}") for t in PARAPHRASES]
            out_items.append(
                {
                    "id": qid,
                    "image": pair["image_path"],
                    "similar_image": pair["image_path"],
                    "target_object": obj,
                    "question": texts,
                    "label": "yes",
                }
            )
            qid += 1
    timings[ROI] = time.perf_counter() - start

    start = time.perf_counter()
    with open(out, "w") as handle:
        json.dump(out_items, handle, indent=4)
    timings[WRITE] = time.perf_counter() - start
    return {
        "timings": timings,
        "unions": unions,
        "judged": judged,
        "questions": len(out_items),
        "question_images": len({item["image"] for item in out_items}),
    }


def run_side(side: str, path: Path, tmp: Path) -> dict:
    """One side's stages in a fresh process (one thread), so neither side inherits the other's memory."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--side", side, "--annotations", str(path), "--out", str(tmp / f"{side}.json")]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{side} side failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def model_free(images: int, rounds: int, tmp: Path) -> tuple[float, list[tuple[str, float, str, str]]]:
    """Both sides' model-free stages, alternately; print min and median; return judge queries per query image
    and the figures to record."""
    from data_builders.synthetic_world import generate_coco_scale_annotations

    path = generate_coco_scale_annotations(tmp / "instances.json", num_images=images)
    runs: dict[str, list[dict]] = {"official": [], "veritune": []}
    for index in range(rounds):
        for side in ("official", "veritune") if index % 2 == 0 else ("veritune", "official"):
            runs[side].append(run_side(side, path, tmp))
    ours, theirs = runs["veritune"][-1], runs["official"][-1]
    print(
        f"COCO-scale annotations: {ours['images']:,} images, {ours['boxes']:,} boxes, {ours['classes']} classes; "
        f"{ours['queries']:,} images with >= 2 classes; {ours['judged']:,} judge queries "
        f"({ours['judged'] / ours['queries']:.2f} per image); both sides write {ours['questions']:,} questions "
        f"about {ours['question_images']:,} images (official: {theirs['questions']:,} about "
        f"{theirs['question_images']:,}; union areas by {theirs['unions']}); {rounds} runs per side, alternately"
    )

    def stat(side: str, stage: str | None) -> tuple[float, float]:
        values = [sum(r["timings"].values()) if stage is None else r["timings"].get(stage, 0.0) for r in runs[side]]
        return min(values), statistics.median(values)

    print(
        "| stage | official min (s) | official median (s) | veritune min (s) | veritune median (s) | "
        "ratio min | ratio median |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    for stage in (*STAGES, None):
        (o_min, o_med), (v_min, v_med) = stat("official", stage), stat("veritune", stage)
        ratios = f"{v_min / o_min:.2f} | {v_med / o_med:.2f}" if o_min else "- | -"
        label = stage or "**all model-free stages**"
        print(f"| {label} | {o_min:.2f} | {o_med:.2f} | {v_min:.2f} | {v_med:.2f} | {ratios} |")
    (o_min, o_med), (v_min, v_med) = stat("official", None), stat("veritune", None)
    print(
        f"model-free ratio veritune / official: {v_min / o_min:.2f} (min), {v_med / o_med:.2f} (median) (target <= 0.3)"
    )
    rss = max(r["peak_rss_gib"] for r in runs["veritune"])
    print(f"peak RSS (veritune side): {rss:.2f} GiB (target < 4)")
    figures = [(f"veritune {stage} (median)", stat("veritune", stage)[1], "s", "lower") for stage in STAGES]
    figures += [
        ("model-free stages, veritune (min)", v_min, "s", "lower"),
        ("model-free stages, veritune (median)", v_med, "s", "lower"),
        ("model-free stages, official (median)", o_med, "s", "lower"),
        ("model-free ratio veritune / official (min)", v_min / o_min, "x", "lower"),
        ("model-free ratio veritune / official (median)", v_med / o_med, "x", "lower"),
        ("peak RSS, veritune side", rss, "GiB", "lower"),
    ]
    return ours["judged"] / ours["queries"], figures


def neighbour_search(images: int, queries: int = 1024, dim: int = 512) -> float:
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
    return queries / elapsed


def clip_throughput(tmp: Path, count: int = 256, batch_size: int = 64) -> float:
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
    return count / elapsed


def judge_throughput(tmp: Path, queries_per_image: float, requests: int = 400, concurrency: int = 8) -> float:
    from fake_openai_server import FakeChatServer

    from veritune.core.llm_client import ChatClient

    with FakeChatServer(lambda request: "no") as server:
        client = ChatClient(server.base_url, "judge", cache_path=tmp / "cache.sqlite", concurrency=concurrency)
        start = time.perf_counter()
        client.complete_many(["warm-up"], desc="judge")  # imports the openai package: once per process
        warm_up = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge")
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        start = time.perf_counter()
        client.complete_many([f"question {i}" for i in range(requests)], desc="judge (cached)")
        cached = time.perf_counter() - start
    rate = requests / elapsed
    print(
        f"openai judge vs local server (concurrency {concurrency}): {rate:.0f} requests/s, "
        f"{1000 * cpu / requests:.1f} ms CPU per request (client and server, one process; the first request, "
        f"which imports the openai package, took {warm_up:.1f} s); "
        f"{1000 * queries_per_image / rate:.1f} s per 1,000 query images ({queries_per_image:.2f} ROI queries each; "
        "client and cache overhead only, the model's latency comes on top); "
        f"rerun from cache: {requests / cached:,.0f} answers/s"
    )
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=82783)
    parser.add_argument("--rounds", type=int, default=3, help="model-free runs per side, alternately")
    parser.add_argument("--side", choices=("official", "veritune"), help=argparse.SUPPRESS)
    parser.add_argument("--annotations", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=64, help="CLIP embedding batch size")
    parser.add_argument("--concurrency", type=int, default=8, help="openai judge requests in flight")
    args = parser.parse_args()
    if args.side:  # one side's model-free stages, in this process (run_side)
        side = veritune_side if args.side == "veritune" else official_side
        print(json.dumps(side(args.annotations, args.out)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        queries_per_image, figures = model_free(args.images, args.rounds, Path(tmp))
        figures.append(("exact neighbour search", neighbour_search(args.images), "query images/s", "higher"))
        clip = clip_throughput(Path(tmp), batch_size=args.batch_size)
        figures.append(("CLIP image embedding (tiny encoder)", clip, "images/s", "higher"))
        judge = judge_throughput(Path(tmp), queries_per_image, concurrency=args.concurrency)
        figures.append(("openai judge vs local server", judge, "requests/s", "higher"))
    print("\n" + figures_table(figures))


if __name__ == "__main__":
    main()
