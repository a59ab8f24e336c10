"""FINER builders' throughput on the offline path: preference tuples per second and MCQ pairs per second
from scene graphs, with peak RSS.

    python perf/bench_finer_builder.py [--images 20000]

Each image has four objects (two attributes and one or two relations each, four negatives everywhere), the
shape of a FINER-CompreCap scene graph; one shared image file stands for all of them.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from figures import figures_table  # perf/, this script's folder, is on the path


def scene_graph(index: int) -> dict:
    names = ["dog", "bench", "tree", "ball"]
    objects = []
    for i, name in enumerate(names):
        objects.append(
            {
                "object": name,
                "object_index": i,
                "neg_object": ["cat", "fox", "wolf", "sheep"],
                "attribute": ["with a brown color", "with a red collar"],
                "neg_attribute": [
                    ["with a white color", "with a black color", "with a grey color", "with a pink color"],
                    ["with a blue collar", "with a green collar", "with no collar", "with a yellow collar"],
                ],
                "parsed_relation": [{"object_a": i, "rel": "is next to the", "object_b": (i + 1) % 4}],
                "neg_relation": [["is under the", "is behind the", "is inside the", "is above the"]],
            }
        )
    return {"example_id": f"bench_{index:07d}", "image": "shared.jpg", "objects": objects}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    args = parser.parse_args()
    from PIL import Image

    from data_builders.finer.bench import BenchSettings, build_finer_bench
    from data_builders.finer.build import build_finer_from_scene_graphs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        Image.new("RGB", (8, 8)).save(root / "shared.jpg")
        (root / "graphs.json").write_text(json.dumps([scene_graph(i) for i in range(args.images)]))
        start = time.perf_counter()
        manifest = build_finer_from_scene_graphs(root / "graphs.json", root, root / "out")
        tuples_s = time.perf_counter() - start
        start = time.perf_counter()
        bench = build_finer_bench(root / "graphs.json", root / "bench.csv", BenchSettings())
        mcq_s = time.perf_counter() - start
    built, pairs = manifest["counts"]["tuples_built"], bench["counts"]["pairs"]
    print(
        f"tuples (scene-graph path): {args.images:,} images -> {built:,} tuples in {tuples_s:.1f} s "
        f"= {built / tuples_s:,.0f} tuples/s"
    )
    print(
        f"MCQs (finer-bench): {args.images:,} images -> {pairs:,} pairs in {mcq_s:.1f} s = {pairs / mcq_s:,.0f} pairs/s"
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS: {rss:.2f} GiB")
    figures = [
        ("tuples (scene-graph path)", built / tuples_s, "tuples/s", "higher"),
        ("MCQs (finer-bench)", pairs / mcq_s, "pairs/s", "higher"),
        ("peak RSS", rss, "GiB", "lower"),
    ]
    print("\n" + figures_table(figures))


if __name__ == "__main__":
    main()
