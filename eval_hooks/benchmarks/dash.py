"""DASH-B, the object-hallucination benchmark of YanNeu/DASH-B (images found by the DASH pipeline).

Release layout: ``images/dash_benchmark_neg.json`` and ``images/dash_benchmark_pos.json``, each
``{source: {object: [image file, ...]}}`` (negatives: the object is absent, ground truth "no"; positives:
present, "yes"); images at ``images/{neg,pos}/<source>/<object>/<file>``, as ``src/data/dash_b.py``
lays them out. The prompt is the official default (``prompt_id=4``): "Can you see a <object> in this
image? Please answer only with yes or no."

Scored as ``src/eval_utils.py`` (``compute_answer``, ``compute_results``): "yes" when the lower-cased
answer contains the substring "yes", else "no" when it contains "no", else unparsed (wrong); ACC over
all images, TNR over the negatives, TPR over the positives, and their harmonic mean; in percent. The
paper's headline is ACC (with the 1,341 / 1,341 balanced release, ACC is also the mean of TPR and TNR).
Per-split breakdown (veritune's addition): the same figures per source of the image and per object. An
item whose image is missing is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.answers import substring_yes_no
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import ratio

PROMPT = "Can you see a {object} in this image? Please answer only with yes or no."
FILES = {"neg": ("dash_benchmark_neg.json", "no"), "pos": ("dash_benchmark_pos.json", "yes")}


def rates(truth: list[str], correct: list[bool]) -> dict[str, float]:
    """ACC, TNR, TPR and their harmonic mean (percent), as ``compute_results``."""
    pos = [c for t, c in zip(truth, correct) if t == "yes"]
    neg = [c for t, c in zip(truth, correct) if t == "no"]
    tpr, tnr = 100 * ratio(sum(pos), len(pos)), 100 * ratio(sum(neg), len(neg))
    return {
        "ACC": 100 * ratio(sum(correct), len(correct)),
        "TNR": tnr,
        "TPR": tpr,
        "harmonic_mean": ratio(2 * tpr * tnr, tpr + tnr),
    }


class DashB(Benchmark):
    name = "dash_b"
    limit_strata = ("label",)  # the negative and positive images
    default_max_new_tokens = 16
    data_layout = (
        "dash_b/images/dash_benchmark_{neg,pos}.json (official) "
        "with images in dash_b/images/{neg,pos}/<source>/<object>/"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "dash_b" / "images", data_root / "dash_b" / "images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        folder = data_path if data_path.is_dir() else data_path.parent
        root = Path(image_root) if image_root else folder
        items = []
        for split, (file_name, label) in FILES.items():
            file = folder / file_name
            if not file.is_file():
                raise UserError(
                    f"{folder}: {file_name} not found "
                    "(DASH-B's images/ folder holds dash_benchmark_neg.json and dash_benchmark_pos.json)"
                )
            data = read_json(file, what="DASH-B file")
            if not isinstance(data, dict):
                raise UserError(f"{file}: expected {{source: {{object: [image files]}}}}")
            for source, objects in data.items():
                if not isinstance(objects, dict):
                    raise UserError(f"{file}: key {source!r}: expected {{object: [image files]}}")
                for obj, images in objects.items():
                    if not isinstance(images, list):
                        raise UserError(f"{file}: {source}/{obj}: expected a list of image files")
                    for image_name in images:
                        image = root / split / source / obj / str(image_name)
                        items.append(
                            self.image_item(
                                f"{split}/{source}/{obj}/{image_name}",
                                PROMPT.format(object=obj),
                                image,
                                {"label": label, "source": source, "object": obj},
                            )
                        )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        answers = [None if item.missing_images else substring_yes_no(predictions.get(item.id, "")) for item in items]
        correct = [answer == item.meta["label"] for item, answer in zip(items, answers)]
        truth = [item.meta["label"] for item in items]
        metrics = rates(truth, correct)
        tables: dict[str, list[dict[str, Any]]] = {}
        for key in ("source", "object"):
            rows = []
            for value in dict.fromkeys(item.meta[key] for item in items):
                index = [i for i, item in enumerate(items) if item.meta[key] == value]
                rows.append(
                    {key: value, "images": len(index), **rates([truth[i] for i in index], [correct[i] for i in index])}
                )
            tables[f"per_{key}"] = rows
        metrics.update({f"{row['source']}/ACC": row["ACC"] for row in tables["per_source"]})
        counts = {
            "items": len(items),
            "missing_images": sum(bool(i.missing_images) for i in items),
            "unparsed": sum(a is None for a in answers),
        }
        return {"metrics": metrics, "tables": tables, "counts": counts}
