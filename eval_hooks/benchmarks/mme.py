"""MME (14 subtasks, two yes/no questions per image) from VLMEvalKit's ``MME.tsv`` (Y/N layout: ``index``,
``image``, ``question``, ``answer`` Yes/No, ``category`` = subtask, ``image_path`` naming the image a
question is about), or from the official release folder ``MME_Benchmark_release_version/``: one folder
per subtask holding either ``images/`` and ``questions_answers_YN/<stem>.txt`` or the images and their
``<stem>.txt`` side by side; each ``.txt`` has two lines ``question<TAB>Yes|No`` about image ``<stem>``.

Scored as the official ``eval_tool/calculation.py`` scores it (BradyFU/Awesome-Multimodal-Large-Language-
Models, branch Evaluation), with VLMEvalKit's ``MME_rating`` (``vlmeval/dataset/utils/yorn.py``) grouping:

- the answer from the official parser (:func:`rewards.graders.mme_yes_no`: exactly yes/no, else "yes" or
  "no" within the first four characters, else "other", which is wrong);
- per subtask: acc = share of questions right; acc+ = share of images whose questions are all right (both,
  for MME's pairs); score = 100·acc + 100·acc+ (0..200);
- perception = the sum of the ten perception subtasks' scores (max 2000), cognition = the sum of the four
  cognition subtasks' (VLMEvalKit calls it "reasoning"; max 800); a subtask absent from the file adds 0
  and is listed under ``missing_subtasks``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.prompts import MAX_SCAN_CHARS
from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.vlmeval_tsv import YnTsv
from rewards.graders import YesNo, completion_text, normalize_yes_no_label

PERCEPTION = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR")
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
IMAGE_SUFFIXES = (".jpg", ".png", ".jpeg", ".JPG", ".PNG", ".JPEG")


def _release_questions(subtask_dir: Path) -> list[tuple[Path, Path]]:
    """``(question file, image folder)`` pairs of one subtask folder of the official release."""
    if (subtask_dir / "questions_answers_YN").is_dir():
        return [(f, subtask_dir / "images") for f in sorted((subtask_dir / "questions_answers_YN").glob("*.txt"))]
    return [(f, subtask_dir) for f in sorted(subtask_dir.glob("*.txt"))]


class MME(YnTsv):
    name = "mme"
    answer_format = ""  # the official parser decides every answer (MME's scorer has no judge)
    data_layout = (
        "MME.tsv (VLMEvalKit layout) under the data root, "
        "or --data mme=MME_Benchmark_release_version (official folders)"
    )
    file_name = "MME.tsv"

    def parse(self, text: str | None) -> str | None:
        return mme_yes_no(text)

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        if not data_path.is_dir():
            return super().load(data_path, image_root)
        subtasks = [task for task in PERCEPTION + COGNITION if (data_path / task).is_dir()]
        if not subtasks:
            raise UserError(
                f"{data_path}: no MME subtask folder ({', '.join(PERCEPTION + COGNITION)}) in it "
                "(expected the official release folder)"
            )
        items = []
        for task in subtasks:
            for file, image_dir in _release_questions(data_path / task):
                if image_root:
                    image_dir = Path(image_root) / image_dir.relative_to(data_path)
                image = next(
                    (
                        image_dir / f"{file.stem}{s}"
                        for s in IMAGE_SUFFIXES
                        if (image_dir / f"{file.stem}{s}").is_file()
                    ),
                    image_dir / f"{file.stem}.jpg",
                )
                lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
                for number, line in enumerate(lines):
                    question, _, answer = line.rpartition("\t")
                    label = normalize_yes_no_label(answer.strip())
                    if not question or label is None:
                        raise UserError(f"{file}: line {number + 1}: expected 'question<TAB>Yes' or 'question<TAB>No'")
                    meta = {
                        "answer": label,
                        "question": question,
                        "category": task,
                        "l2_category": None,
                        "image_key": f"{task}/{image.name}",
                    }
                    items.append(self.image_item(f"{task}/{file.stem}/q{number}", question, image, meta))
        return items

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        correct, unresolved = self.grade(items, predictions)
        by_task: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
        for item in items:
            by_task[item.meta["category"] or "unknown"][item.meta["image_key"]].append(correct[item.id])
        metrics: dict[str, float] = {}
        table = []
        unpaired = 0
        for task, images in by_task.items():
            flags = [flag for answers in images.values() for flag in answers]
            acc, acc_plus = 100 * sum(flags) / len(flags), 100 * sum(all(a) for a in images.values()) / len(images)
            unpaired += sum(len(answers) != 2 for answers in images.values())
            group = "perception" if task in PERCEPTION else "cognition" if task in COGNITION else "other"
            table.append(
                {
                    "subtask": task,
                    "group": group,
                    "images": len(images),
                    "questions": len(flags),
                    "acc": acc,
                    "acc_plus": acc_plus,
                    "score": acc + acc_plus,
                }
            )
            metrics.update({f"{task}/score": acc + acc_plus, f"{task}/acc": acc, f"{task}/acc_plus": acc_plus})
        scores = {row["subtask"]: row["score"] for row in table}
        metrics["perception"] = sum(scores.get(task, 0.0) for task in PERCEPTION)
        metrics["cognition"] = sum(scores.get(task, 0.0) for task in COGNITION)
        metrics["total"] = metrics["perception"] + metrics["cognition"]
        counts = {
            "items": len(items),
            "images": sum(len(images) for images in by_task.values()),
            "unpaired_images": unpaired,
            "other_answers": unresolved,
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        missing = [task for task in PERCEPTION + COGNITION if task not in scores]
        return {"metrics": metrics, "tables": {"by_subtask": table}, "counts": counts, "missing_subtasks": missing}


# ---- MME's official answer parsing


def mme_yes_no(text: Any) -> YesNo | None:
    """The official MME parser (``eval_tool/calculation.py`` ``parse_pred_ans``, BradyFU/Awesome-
    Multimodal-Large-Language-Models, branch Evaluation): lower-case; exactly "yes"/"no" is the answer;
    otherwise "yes" when the first four characters contain "yes", else "no" when they contain "no";
    else None (the script's "other", never correct).

    >>> mme_yes_no("No, there is no dog.")
    'no'
    >>> mme_yes_no("There is a dog.") is None
    True
    """
    text = completion_text(text)
    if text is None:
        return None
    answer = text[:MAX_SCAN_CHARS].lower()
    if answer in ("yes", "no"):
        return answer  # type: ignore[return-value]
    head = answer[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return None
