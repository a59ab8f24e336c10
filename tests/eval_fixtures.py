"""Small evaluation fixtures for the runner, watch, callback and report tests: an ORIC-Bench file in the
official release layout, a checkpoint-like copy of a tiny model, and a benchmark with multi-image and
image-free questions (loaded by dotted path, ``eval_fixtures.MixedImagesBench``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from PIL import Image

from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import extract_yes_no

PARAPHRASES = (
    "Is there {o} in the image?",
    "Does the image contain {o}?",
    "Have you noticed {o} in the image?",
    "Can you see {o} in the image?",
)


def write_oric_bench(data_root: Path, questions: int = 6) -> tuple[Path, Path]:
    """An ORIC-Bench file at ``DATA_ROOT/oric/oric_bench.json`` with images in ``DATA_ROOT/coco/val2014/``
    (the ``--data-root`` layout). Returns ``(file, image_root)``."""
    images = data_root / "coco" / "val2014"
    images.mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(questions):
        name = f"COCO_val2014_{index:012d}.jpg"
        Image.new("RGB", (56 + 8 * index, 48 + 4 * (index % 3)), (30 * index % 255, 100, 50)).save(images / name)
        target = ["cup", "apple", "dog"][index % 3]
        article = "an" if target == "apple" else "a"
        records.append(
            {
                "id": index + 1,
                "image": name,
                "target_object": target,
                "problem": [t.format(o=f"{article} {target}") for t in PARAPHRASES],
                "solution": "yes" if index % 2 else "no",
            }
        )
    path = data_root / "oric" / "oric_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return path, images


def make_checkpoint(model_dir: Path, run_dir: Path, step: int) -> Path:
    """A ``checkpoint-N`` folder as the Trainer leaves it: weights and processor, trainer state last."""
    checkpoint = run_dir / f"checkpoint-{step}"
    shutil.copytree(model_dir, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return checkpoint


class MixedImagesBench(Benchmark):
    """Yes/no questions with two images, one image or none, from ``DATA/mixed.json`` rows
    ``{id, question, images: [...], answer}``; accuracy by number of images."""

    name = "eval_fixtures.MixedImagesBench"
    default_max_new_tokens = 6

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row in json.loads(Path(data_path).read_text()):
            images = [root / name for name in row["images"]]
            items.append(
                EvalItem(
                    id=str(row["id"]),
                    prompt=row["question"],
                    images=images,
                    max_new_tokens=self.default_max_new_tokens,
                    meta={"answer": row["answer"], "images": len(images)},
                    missing_images=[p for p in images if not p.is_file()],
                )
            )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct = [
            not item.missing_images and extract_yes_no(predictions.get(item.id)) == item.meta["answer"]
            for item in items
        ]
        by_count = {}
        for count in sorted({item.meta["images"] for item in items}):
            group = [c for c, item in zip(correct, items) if item.meta["images"] == count]
            by_count[count] = sum(group) / len(group)
        return {
            "metrics": {
                "accuracy": sum(correct) / len(items),
                **{f"images_{k}/accuracy": v for k, v in by_count.items()},
            },
            "tables": {"by_image_count": [{"images": k, "accuracy": v} for k, v in by_count.items()]},
            "counts": {"items": len(items), "missing_images": sum(bool(item.missing_images) for item in items)},
        }


def write_mixed_bench(root: Path) -> Path:
    """Six questions for :class:`MixedImagesBench`: two with two images, two with one, two with none."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(4):
        Image.new("RGB", (48 + 16 * index, 40), (200, 40 * index, 90)).save(root / f"{index}.png")
    rows = [
        {
            "id": "two-a",
            "question": "Do both images show the same colour?",
            "images": ["0.png", "1.png"],
            "answer": "no",
        },
        {
            "id": "two-b",
            "question": "Is the second image wider than the first one?",
            "images": ["2.png", "3.png"],
            "answer": "yes",
        },
        {"id": "one-a", "question": "Is this image red?", "images": ["0.png"], "answer": "yes"},
        {"id": "one-b", "question": "Is there a dog?", "images": ["3.png"], "answer": "no"},
        {"id": "none-a", "question": "Is Paris the capital of France?", "images": [], "answer": "yes"},
        {"id": "none-b", "question": "Is two larger than three? Think about it.", "images": [], "answer": "no"},
    ]
    path = root / "mixed.json"
    path.write_text(json.dumps(rows))
    return path
