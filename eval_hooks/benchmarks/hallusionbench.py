"""HallusionBench (official ``HallusionBench.json``: all 1,129 questions, the 178 image-free ones included).

Scored as the official ``evaluation.py``/``utils.py`` (tianyi-lab/HallusionBench) score it:
- aAcc: the share of questions answered correctly;
- fAcc: per figure (``category_subcategory_set_figure``), a figure counts when every question on it is
  right; VS questions with ``figure_id`` 0 (asked without their figure) are left out, as officially;
- qAcc: per question pair (``category_subcategory_set_question``), a pair counts when the question is right
  on every figure it is asked about (and without a figure, for VS).
Correctness (``assign_correctness``): officially a GPT-4 judge labels each answer correct ("1"),
incorrect ("0") or uncertain ("2"); here the shared rule-based yes/no grader
:func:`rewards.graders.extract_yes_no` compares the answer with ``gt_answer`` ("1" yes, "0" no) and an
answer it cannot resolve is uncertain (with ``--judge-*`` an LLM judges every answer against
``gt_answer_details`` instead, as officially). As officially, an uncertain answer counts as correct on a
VS question asked without its figure (``figure_id`` 0: not knowing is right there) and as wrong
everywhere else. Images are ``<image_root>/<category>/<subcategory>/<set_id>_<figure_id>.png``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import extract_yes_no

FIELDS = ("category", "subcategory", "visual_input", "set_id", "figure_id", "question_id", "question", "gt_answer")


def _key(meta: dict[str, Any], *parts: str) -> str:
    return "_".join(str(meta[p]) for p in parts)


class HallusionBench(Benchmark):
    name = "hallusionbench"
    # VD/VS and their subcategories; a figure set whole (its question pairs and figure groups are scored together)
    limit_strata = ("category", "subcategory")
    limit_groups = ("category", "subcategory", "set_id")
    default_max_new_tokens = 64
    answer_format = "yes_no"
    judge_mode = "gt_answer_details"  # with a judge: every answer judged against the reference explanation
    data_layout = (
        "hallusionbench/HallusionBench.json (official), images in hallusionbench/images/<category>/<subcategory>/"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "hallusionbench" / "HallusionBench.json", data_root / "hallusionbench" / "images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data = read_json(data_path, what="HallusionBench file")
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row, record in enumerate(data if isinstance(data, list) else []):
            missing = [f for f in FIELDS if not isinstance(record, dict) or f not in record]
            if missing:
                raise UserError(
                    f"{data_path}: row {row}: missing field '{missing[0]}' "
                    f"(HallusionBench records have {', '.join(FIELDS)})"
                )
            meta = {f: str(record[f]) for f in FIELDS}
            meta["gt_answer_details"] = str(record.get("gt_answer_details") or "")
            images = []
            if meta["visual_input"] != "0":
                images = [root / meta["category"] / meta["subcategory"] / f"{meta['set_id']}_{meta['figure_id']}.png"]
            items.append(
                EvalItem(
                    id=_key(meta, "category", "subcategory", "set_id", "figure_id", "question_id"),
                    prompt=record["question"],
                    images=images,
                    max_new_tokens=self.default_max_new_tokens,
                    meta=meta,
                    missing_images=[p for p in images if not p.is_file()],
                )
            )
        if not items:
            raise UserError(f"{data_path}: expected a JSON list of HallusionBench records ({', '.join(FIELDS)})")
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct: dict[str, bool] = {}
        uncertain = 0
        for item in items:
            answer = None if item.missing_images else extract_yes_no(predictions.get(item.id))
            uncertain += answer is None
            truth = "yes" if item.meta["gt_answer"] == "1" else "no"
            if answer is None and item.meta["category"] == "VS" and item.meta["figure_id"] == "0":
                # uncertain without the figure is correct (assign_correctness); no answer at all is not
                correct[item.id] = item.id in predictions
            else:
                correct[item.id] = answer == truth
        figures: dict[str, list[bool]] = defaultdict(list)
        pairs: dict[str, list[bool]] = defaultdict(list)
        for item in items:
            meta = item.meta
            if not (meta["category"] == "VS" and meta["figure_id"] == "0"):  # the official exception
                figures[_key(meta, "category", "subcategory", "set_id", "figure_id")].append(correct[item.id])
            pairs[_key(meta, "category", "subcategory", "set_id", "question_id")].append(correct[item.id])
        metrics = {
            "aAcc": 100 * sum(correct.values()) / len(correct) if correct else 0.0,
            "fAcc": 100 * sum(all(v) for v in figures.values()) / len(figures) if figures else 0.0,
            "qAcc": 100 * sum(all(v) for v in pairs.values()) / len(pairs) if pairs else 0.0,
        }
        by_category = []
        for category in sorted({item.meta["category"] for item in items}):
            ids = [item.id for item in items if item.meta["category"] == category]
            by_category.append(
                {"category": category, "questions": len(ids), "aAcc": 100 * sum(correct[i] for i in ids) / len(ids)}
            )
        counts = {
            "items": len(items),
            "figures": len(figures),
            "question_pairs": len(pairs),
            "uncertain": uncertain,
            "image_free": sum(not item.images for item in items),
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {"metrics": metrics, "tables": {"by_category": by_category}, "counts": counts}
