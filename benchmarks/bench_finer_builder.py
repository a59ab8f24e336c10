"""FINER scene-graph path throughput: preference tuples per second and peak RSS.

    python benchmarks/bench_finer_builder.py [--images 20000]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    args = parser.parse_args()
    from PIL import Image

    from data_builders.finer.build import build_finer_from_scene_graphs

    graph = {
        "objects": [
            {"id": f"o{i}", "name": name, "negatives": ["cat", "fox", "wolf", "sheep"],
             "attributes": [{"value": "brown", "negatives": ["white", "black"]}, {"value": "with a red collar", "negatives": ["with a blue collar"]}]}
            for i, name in enumerate(["dog", "bench", "tree", "ball"])
        ],
        "relations": [{"object_a": "o0", "rel": "is next to", "object_b": "o1", "negatives": ["is under", "is behind"]},
                      {"object_a": "o0", "rel": "is chasing", "object_b": "o3", "negatives": ["is ignoring"]}],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        Image.new("RGB", (8, 8)).save(root / "shared.jpg")
        graphs = [{**graph, "image": "shared.jpg"} for _ in range(args.images)]
        (root / "graphs.json").write_text(json.dumps(graphs))
        start = time.perf_counter()
        manifest = build_finer_from_scene_graphs(root / "graphs.json", root, root / "out")
        elapsed = time.perf_counter() - start
    built = manifest["counts"]["built"]
    print(f"scene-graph path: {args.images:,} images -> {built:,} tuples in {elapsed:.1f} s = {built / elapsed:,.0f} tuples/s")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
