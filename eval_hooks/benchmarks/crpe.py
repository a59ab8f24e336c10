"""CRPE, relation split (OpenGVLab/all-seeing, ASMv2): circular multiple-choice questions on relations.

Release layout (the OpenGVLab/CRPE dataset): ``crpe_relation.jsonl``, one JSON object per line with
``question_id``, ``image`` (relative to the image folder), ``text`` (the question, its lettered options
and the answer instruction, used verbatim as the prompt, as ``llava.eval.model_vqa_loader`` does),
``category`` (``exist``, ``subject``, ``predicate``, ``object``) and ``correct_option`` (a letter). Each
question appears four times in a row within its category, its options rotated (circular evaluation).

Scored as ``all-seeing-v2/llava/eval/eval_crpe.py``: the stripped answer is taken as the selected option
only when it is a single character (anything longer is invalid and wrong), compared case-sensitively
with ``correct_option``; per category, answers are taken in file order in groups of four, and a group
counts only when all four are right; accuracy per category in percent. ``total`` pools the groups of
every category (the FINER paper's "Tot." column of Table 14 and "CRPE_R Acc." of Table 2, which are not
the mean of its Sub./Pred./Obj. columns); ``average`` is the mean over the categories present and
``relation_average`` the mean over subject, predicate and object (veritune's summaries; the official
script prints each category). The official per-category answer-letter
frequencies are reported as a table. Generation budget 128 new tokens (``model_vqa_loader``'s default),
greedy (its ``--temperature 0``). A group cut by ``--limit`` is left out; an item whose image is missing
is wrong.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json_or_jsonl
from eval_hooks.base import Benchmark, EvalItem, release_file_paths
from rewards.graders import completion_text

FIELDS = ("question_id", "image", "text", "category", "correct_option")
RELATION_CATEGORIES = ("subject", "predicate", "object")
STEP = 4  # circular variants per question


class CrpeRelation(Benchmark):
    name = "crpe_relation"
    limit_strata = ("category",)
    limit_groups = ("circle",)  # the four rotations of a question, scored as one group
    default_max_new_tokens = 128
    data_layout = (
        "crpe/crpe_relation.jsonl (official) with images under crpe/ (the jsonl's image paths are relative to it)"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "crpe" / "crpe_relation.jsonl", data_root / "crpe"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path, root = release_file_paths(data_path, image_root, "crpe_relation.jsonl", images="")
        items, seen, per_category = [], set(), Counter()
        for row, record in enumerate(read_json_or_jsonl(data_path, what="CRPE file")):
            if not isinstance(record, dict) or not set(FIELDS) <= record.keys():
                raise UserError(f"{data_path}: line {row + 1}: expected CRPE fields {', '.join(FIELDS)}")
            qid = str(record["question_id"])
            if qid in seen:
                raise UserError(f"{data_path}: line {row + 1}: question_id {qid} appears twice")
            seen.add(qid)
            image = root / record["image"]
            category = str(record["category"])
            circle = f"{category}/{per_category[category] // STEP}"  # the scorer's group of four, in file order
            per_category[category] += 1
            items.append(
                self.image_item(
                    qid,
                    str(record["text"]),
                    image,
                    {"category": category, "answer": str(record["correct_option"]), "circle": circle},
                )
            )
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        by_category: dict[str, list[bool]] = {}
        frequencies: dict[str, Counter[str]] = {}
        invalid = 0
        for item in items:
            selected = None if item.missing_images else single_character_option(predictions.get(item.id, ""))
            if selected is None or len(item.meta["answer"]) != 1:
                invalid += not item.missing_images
                by_category.setdefault(item.meta["category"], []).append(False)
                continue
            frequencies.setdefault(item.meta["category"], Counter())[selected] += 1
            by_category.setdefault(item.meta["category"], []).append(selected == item.meta["answer"])
        rows, metrics, partial = [], {}, 0
        for category, flags in by_category.items():
            groups = [flags[i : i + STEP] for i in range(0, len(flags) - len(flags) % STEP, STEP)]
            partial += len(flags) % STEP
            accuracy = 100 * sum(all(group) for group in groups) / len(groups) if groups else 0.0
            rows.append(
                {
                    "category": category,
                    "questions": len(groups),
                    "accuracy": accuracy,
                    "answer_letters": dict(sorted(frequencies.get(category, Counter()).items())),
                }
            )
            metrics[f"{category}/accuracy"] = accuracy
        all_groups = sum(row["questions"] for row in rows)
        metrics["total"] = sum(row["accuracy"] * row["questions"] for row in rows) / all_groups if all_groups else 0.0
        metrics["average"] = sum(row["accuracy"] for row in rows) / len(rows) if rows else 0.0
        relation = [row["accuracy"] for row in rows if row["category"] in RELATION_CATEGORIES]
        if relation:
            metrics["relation_average"] = sum(relation) / len(relation)
        counts = {
            "items": len(items),
            "invalid_answers": invalid,
            "left_out_partial_groups": partial,
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {"metrics": metrics, "tables": {"per_category": rows}, "counts": counts}


# ---- CRPE's official answer reading


def single_character_option(text: Any) -> str | None:
    """CRPE's ``eval_crpe.py`` reading: the stripped answer is the option only when it is one character
    (compared case-sensitively with the correct letter); any longer answer is invalid (None, wrong)."""
    text = (completion_text(text) or "").strip()
    return text if len(text) == 1 else None
