"""ORIC builder throughput.

    python perf/bench_oric_builder.py [--images 82783] [--rounds 3] [--official ../shared/official/ORIC]

1. Model-free stages on a generated COCO-2014-train-scale annotation file (82,783 images, ~600,000
   boxes, 80 classes): the official ORIC code itself against veritune's builder, run alternately (each run
   in a fresh process, one thread), reported as min and median per stage and side with their ratio
   (target: veritune at or below the official time in every stage, at most 0.3x in total) and each side's
   peak RSS. Both sides judge every query image (>= 2 classes) with the same co-occurrence statistics
   and write the "yes" questions of the same images; a build stops once its counts are met, so this is
   the worst case. The first run of each side also checks that both split every image into the same
   ROI and non-ROI classes.
2. The exact most-similar-image search at that scale (random 512-d unit embeddings).
3. CLIP image embedding throughput with the tiny offline CLIP (images/s at the batch size shown).
4. The `openai` judge against a local chat-completions server: requests/s at the chosen concurrency, and
   the cost per 1,000 query images at the measured number of ROI queries per image.

The official side is the public ORIC builder (ZhaoyangLi-1/ORIC, MIT; the commit in its COMMIT file is
printed), copied into a temporary folder and imported from there: ``main.py``'s steps in its order, each
the repository's own code: ``COCO(path)``, ``ORIC.extract_images``, ``ORIC.extract_QA`` (ROI split by
shapely union areas, the LLM question per ROI object, the question records) and ``json.dump(questions,
f, indent=4)``. What is replaced: its LLM call (``Chatbot._call_gpt_5_text_only``) by a stub that reads the
prompt and answers from the same leave-one-out co-occurrence statistics as veritune's
``CooccurrenceJudge`` (its statistics are the official side's "co-occurrence statistics" stage; the time
inside its answers is printed separately); the CLIP model work of both sides (negatives, the similar-image
search: each query image stands for its own similar image on both sides), timed apart in 2. and 3.
``main.py``'s intermediate caches (``*_sampled_images.json``, the similar pairs) are not written, and both
sides take images with at least two classes (``main.py`` passes ``min_num_objects=3``; veritune's default
is 2). shapely (the ``bench`` extra) is needed by the official code.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
OFFICIAL_ORIC = REPO_ROOT.parent / "shared" / "official" / "ORIC"
sys.path.insert(0, str(REPO_ROOT / "tests"))

from figures import figures_table  # noqa: E402  (perf/, this script's folder, is on the path)

STAGES = LOAD, CANDIDATES, COOCCURRENCE, ROI, WRITE = (
    "load annotations",
    "candidate images",
    "co-occurrence statistics",
    "ROI split + judge + compose",
    "write questions",
)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class Stages:
    """Wall and CPU (user + system) seconds of each stage: ``with stages(name): ...``."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[name] = time.perf_counter() - wall
        self.cpu[name] = time.process_time() - cpu


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def veritune_side(path: Path, out: Path, check: bool) -> dict:
    """veritune's model-free stages, with the builder's own functions: seconds per stage and counts."""
    from data_builders.oric.annotations import describe, load_instances, roi_split
    from data_builders.oric.build import (
        JUDGE_CHUNK,
        BuildSettings,
        BuildStats,
        judge_roi_objects,
        pair_items,
        query_positions,
        write_outputs,
    )
    from data_builders.oric.judges import CooccurrenceJudge

    imported = peak_rss_gib()
    stage = Stages()
    with stage(LOAD):
        records, names = load_instances(path)

    with stage(CANDIDATES):
        stats = BuildStats()
        queries = [records[i] for i in query_positions(records, path.parent, BuildSettings("bench", 0, 0), stats)]

    with stage(COOCCURRENCE):
        judge = CooccurrenceJudge(records, threshold=0.25)

    # ROI split (exact unions) and the judge chunk by chunk as build_items does, then each query image's yes
    # questions (pair_items, the image standing for its own similar image: no CLIP here)
    with stage(ROI):
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

    with stage(WRITE):
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
    peak = peak_rss_gib()
    result = {
        "timings": stage.wall,
        "cpu": stage.cpu,
        "images": len(records),
        "boxes": sum(len(b) for r in records for b in r.boxes.values()),
        "classes": len(names),
        "queries": len(queries),
        "judged": sum(stats.judge_answers.values()),
        "questions": len(items),
        "question_images": digest(sorted({item["image"] for item in items})),
        "output_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "rss_imports_gib": imported,
        "peak_rss_gib": peak,
    }
    if check:  # after the timing: each query image's (ROI, non-ROI) classes
        result["split"] = digest(
            [[r.image_id, *map(sorted, roi_split(describe(r)))] for r in sorted(queries, key=lambda r: r.image_id)]
        )
    return result


class CooccurrenceStub:
    """Stands in for the official code's LLM call: reads the official prompt back into (background objects,
    target object) and answers from the leave-one-out co-occurrence statistics of ``CooccurrenceJudge``
    (same formula, same threshold), counted here in plain Python. The image asked about is set by the
    caller (``image``), since the prompt does not name it."""

    def __init__(self, coco: Any, template: str, threshold: float = 0.25) -> None:
        names = {cat_id: cat["name"] for cat_id, cat in coco.cats.items()}
        self.classes_of = {image: {names[a["category_id"]] for a in anns} for image, anns in coco.imgToAnns.items()}
        self.class_counts: Counter[str] = Counter()
        self.pair_counts: Counter[tuple[str, str]] = Counter()
        for classes in self.classes_of.values():
            self.class_counts.update(classes)
            self.pair_counts.update(combinations(sorted(classes), 2))
        pattern = re.escape(template)
        pattern = pattern.replace(re.escape("{background_objects}"), r"\[(.*)\]", 1)
        self.prompt = re.compile(pattern.replace(re.escape("{target_objects}"), "(.*)", 1), re.DOTALL)
        self.threshold, self.image, self.calls, self.seconds = threshold, None, 0, 0.0

    def __call__(self, prompt: str) -> str:
        start = time.perf_counter()
        background, target = self.prompt.fullmatch(prompt).groups()
        own = self.classes_of.get(self.image, ())
        total = 0.0
        context = background.split(",")
        for c in context:
            both = c in own and target in own
            pair = self.pair_counts[(c, target) if c < target else (target, c)] - both
            count = self.class_counts[c] - (c in own)
            total += pair / count if count > 0 else 0.0
        answer = "yes" if total / len(context) >= self.threshold else "no"
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return answer


class NoClip:
    """The CLIP model ``ORIC.__init__`` moves to its device: the CLIP work is not part of this comparison."""

    def to(self, device: Any) -> NoClip:
        return self


def official_side(path: Path, out: Path, official: Path, check: bool) -> dict:
    """The official ORIC code's model-free stages (module docstring): seconds per stage and counts."""
    sys.path.insert(0, str(official))
    os.environ["OPENAI_API_KEY"] = "unused: the LLM call is stubbed"
    import numpy as np
    from pycocotools.coco import COCO
    from utils.oric import ORIC, DecodingArguments

    imported = peak_rss_gib()
    stage = Stages()
    with stage(LOAD), contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
        coco = COCO(str(path))
    # as main.py builds them (the split: "val", ORIC-Bench's file layout, as veritune's bench kind)
    decoding_args = DecodingArguments(
        model="gpt-5-2025-08-07", max_tokens=1024, image_detail="auto", temperature=0, top_p=1.0
    )
    oric = ORIC(
        coco,
        NoClip(),
        None,
        "cpu",
        image_folder=str(path.parent),
        reject_prompt_template=str(official / "prompts" / "reject_sample.txt"),
        split="val",
        decoding_args=decoding_args,
    )

    with stage(CANDIDATES):
        sampled = oric.extract_images(min_num_objects=2)

    with stage(COOCCURRENCE):
        stub = CooccurrenceStub(coco, oric.reject_template)

    # the model work, not timed: each image stands for its own similar image (extract_similar_images' layout)
    # and has no CLIP negatives; the stub answers the LLM question about the image being asked about
    for pair in sampled:
        pair["similar_images"] = {key: pair[key] for key in ("image_id", "image_info", "image_path", "annotations")}
    ids = {pair["image_path"]: pair["image_id"] for pair in sampled}
    oric.chatbot._call_gpt_5_text_only = stub
    oric.construct_negative_questions = lambda *args, **kwargs: {}
    positives = oric.construct_positive_questions

    def construct_positive_questions(*, image_path: str, **kwargs: Any) -> Any:
        stub.image = ids[image_path]
        return positives(image_path=image_path, **kwargs)

    oric.construct_positive_questions = construct_positive_questions
    random.seed(42)  # main.py's seeds (its random.sample of the pairs only happens above --num_images)
    np.random.seed(42)

    with stage(ROI):
        questions = oric.extract_QA(sampled, num_targets=2, max_images=len(sampled))

    with stage(WRITE), open(out, "w") as f:  # main.py's own lines
        json.dump(questions, f, indent=4)
    peak = peak_rss_gib()
    result = {
        "timings": stage.wall,
        "cpu": stage.cpu,
        "stub_seconds": stub.seconds,
        "judged": stub.calls,
        "questions": len(questions),
        "question_images": digest(sorted({item["image"] for item in questions})),
        "rss_imports_gib": imported,
        "peak_rss_gib": peak,
    }
    if check:  # after the timing: each candidate image's (ROI, non-ROI) classes, as extract_QA splits them
        split = []
        for pair in sorted(sampled, key=lambda p: p["image_id"]):
            info = pair["image_info"]
            parts = oric._classify_by_area(pair["annotations"], info["width"], info["height"])
            split.append([pair["image_id"], sorted(parts["target"]), sorted(parts["background"])])
        result["split"] = digest(split)
    return result


def run_side(side: str, path: Path, tmp: Path, official: Path, check: bool) -> dict:
    """One side's stages in a fresh process (one thread), so neither side inherits the other's memory."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--side", side, "--annotations", str(path), "--out", str(tmp / f"{side}.json")]
    command += ["--official", str(official)] + (["--check"] if check else [])
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{side} side failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def official_copy(source: Path, tmp: Path) -> tuple[Path, str]:
    """The official ORIC code copied into ``tmp`` (imported from there), and its commit."""
    if not (source / "utils" / "oric.py").is_file():
        raise SystemExit(f"{source}: not the official ORIC code (no utils/oric.py); pass --official PATH")
    try:
        import shapely  # noqa: F401
    except ImportError:
        raise SystemExit("the official ORIC code needs shapely: pip install -e '.[bench]'") from None
    copy = shutil.copytree(source, tmp / "official-oric", ignore=shutil.ignore_patterns("__pycache__", ".git"))
    commit = (source / "COMMIT").read_text().strip() if (source / "COMMIT").is_file() else "unknown commit"
    return Path(copy), commit


def model_free(
    images: int, rounds: int, tmp: Path, official_source: Path
) -> tuple[float, list[tuple[str, float, str, str]]]:
    """Both sides' model-free stages, alternately; print min and median; return judge queries per query image
    and the figures to record."""
    from miniature.world import generate_coco_scale_annotations

    official, commit = official_copy(official_source, tmp)
    path = generate_coco_scale_annotations(tmp / "instances.json", num_images=images)
    runs: dict[str, list[dict]] = {"official": [], "veritune": []}
    for index in range(rounds):
        for side in ("official", "veritune") if index % 2 == 0 else ("veritune", "official"):
            runs[side].append(run_side(side, path, tmp, official, check=index == 0))
    ours, theirs = runs["veritune"][0], runs["official"][0]
    same_split = ours["split"] == theirs["split"]
    same_images = all(r["question_images"] == ours["question_images"] for r in runs["official"] + runs["veritune"])
    outputs = {r["output_sha256"] for r in runs["veritune"]}
    print(
        f"official code: ZhaoyangLi-1/ORIC @ {commit} (its LLM call stubbed, its CLIP work left out: see the "
        "module docstring)\n"
        f"COCO-scale annotations: {ours['images']:,} images, {ours['boxes']:,} boxes, {ours['classes']} classes; "
        f"{ours['queries']:,} images with >= 2 classes; ROI split the same on every one of them: "
        f"{'yes' if same_split else 'NO'}; judge queries: veritune {ours['judged']:,} "
        f"({ours['judged'] / ours['queries']:.2f} per image), official {theirs['judged']:,} (it stops at 2 'no' "
        f"answers); questions: veritune {ours['questions']:,}, official {theirs['questions']:,}, about the same "
        f"images: {'yes' if same_images else 'NO'}; veritune's questions file sha256 "
        f"{'/'.join(sorted(outputs))[:16]}...; {rounds} runs per side, alternately"
    )

    def stat(side: str, stage: str | None, clock: str = "timings") -> tuple[float, float]:
        values = [sum(r[clock].values()) if stage is None else r[clock][stage] for r in runs[side]]
        return min(values), statistics.median(values)

    for clock, what in (("timings", "wall-clock seconds"), ("cpu", "CPU seconds (user + system, this process)")):
        print(
            f"\n{what}:\n| stage | official min | official median | veritune min | veritune median | "
            "ratio min | ratio median |\n| --- | --- | --- | --- | --- | --- | --- |"
        )
        for stage in (*STAGES, None):
            (o_min, o_med), (v_min, v_med) = stat("official", stage, clock), stat("veritune", stage, clock)
            ratios = f"{v_min / o_min:.2f} | {v_med / o_med:.2f}" if o_min else "- | -"
            label = stage or "**all model-free stages**"
            if stage == COOCCURRENCE:
                label += " (official: the stub's)"
            print(f"| {label} | {o_min:.2f} | {o_med:.2f} | {v_min:.2f} | {v_med:.2f} | {ratios} |")
    (o_min, o_med), (v_min, v_med) = stat("official", None), stat("veritune", None)
    (oc_min, oc_med), (vc_min, vc_med) = stat("official", None, "cpu"), stat("veritune", None, "cpu")
    stub = [r["stub_seconds"] for r in runs["official"]]
    print(
        f"\nmodel-free ratio veritune / official: {v_min / o_min:.2f} (min), {v_med / o_med:.2f} (median) "
        f"(target <= 0.3); in CPU time {vc_min / oc_min:.2f} (min), {vc_med / oc_med:.2f} (median)\n"
        f"the stub's answers, inside the official ROI stage: {min(stub):.2f} s (min), "
        f"{statistics.median(stub):.2f} s (median); its statistics are the official co-occurrence stage"
    )
    slower = [stage for stage in STAGES if stat("veritune", stage)[1] > stat("official", stage)[1]]
    print(f"stages where veritune's median is above the official code's: {', '.join(slower) or 'none'}")
    rss = {side: max(r["peak_rss_gib"] for r in runs[side]) for side in runs}
    base = {side: max(r["rss_imports_gib"] for r in runs[side]) for side in runs}
    print(
        f"peak RSS: official {rss['official']:.2f} GiB, veritune {rss['veritune']:.2f} GiB (target < 4); "
        f"after the imports (torch on both sides): official {base['official']:.2f} GiB, "
        f"veritune {base['veritune']:.2f} GiB"
    )
    figures = [(f"veritune {stage} (median)", stat("veritune", stage)[1], "s", "lower") for stage in STAGES]
    figures += [
        ("model-free stages, veritune (min)", v_min, "s", "lower"),
        ("model-free stages, veritune (median)", v_med, "s", "lower"),
        ("model-free stages, official code (median)", o_med, "s", "lower"),
        ("model-free ratio veritune / official code (min)", v_min / o_min, "x", "lower"),
        ("model-free ratio veritune / official code (median)", v_med / o_med, "x", "lower"),
        ("model-free CPU-time ratio veritune / official code (median)", vc_med / oc_med, "x", "lower"),
        ("peak RSS, veritune side", rss["veritune"], "GiB", "lower"),
        ("peak RSS, official side", rss["official"], "GiB", "lower"),
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
    from miniature.tiny.clip import build_tiny_clip

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

    from core.llm_client import ChatClient

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
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--official", type=Path, default=OFFICIAL_ORIC, help="the official ORIC code (read only)")
    parser.add_argument("--model-free-only", action="store_true", help="only 1., the comparison with the official code")
    parser.add_argument("--batch-size", type=int, default=64, help="CLIP embedding batch size")
    parser.add_argument("--concurrency", type=int, default=8, help="openai judge requests in flight")
    args = parser.parse_args()
    if args.side:  # one side's model-free stages, in this process (run_side)
        if args.side == "veritune":
            result = veritune_side(args.annotations, args.out, args.check)
        else:
            result = official_side(args.annotations, args.out, args.official, args.check)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as tmp:
        queries_per_image, figures = model_free(args.images, args.rounds, Path(tmp), args.official)
        if args.model_free_only:
            print("\n" + figures_table(figures))
            return
        figures.append(("exact neighbour search", neighbour_search(args.images), "query images/s", "higher"))
        clip = clip_throughput(Path(tmp), batch_size=args.batch_size)
        figures.append(("CLIP image embedding (tiny encoder)", clip, "images/s", "higher"))
        judge = judge_throughput(Path(tmp), queries_per_image, concurrency=args.concurrency)
        figures.append(("openai judge vs local server", judge, "requests/s", "higher"))
    print("\n" + figures_table(figures))


if __name__ == "__main__":
    main()
