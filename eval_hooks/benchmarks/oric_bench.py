"""ORIC-Bench (arXiv 2509.15695, Sec. 4, App. A.4, B.2; official release and scorer
``evaluate.py`` of ZhaoyangLi-1/ORIC): yes/no object existence under contextual incongruity. Every question
is asked with each of its four paraphrases; metrics are computed per paraphrase and averaged over the
four, as the paper reports.

Protocol (App. B.2, Sec. 4.1): the image, then the question wrapped in the prompt of Fig. 7
("Question: {question}" and, on the next line, "Please answer the question based on the given image."),
greedy decoding with a 1,024-token limit. Variants: ``oric_bench_cot`` wraps it in the zero-shot CoT
prompt of Fig. 12 ("Let's think step-by-step and then answer the question based on the given image.");
``oric_bench_r1`` asks it with the R1-style instruction of the Visual-RFT training prompt (Fig. 11).

Graders: ``oric_bench`` and ``oric_bench_cot`` read answers with the shared free-form grader
:func:`rewards.graders.extract_yes_no` (the paper's first, heuristic step; its GPT second step is the
optional ``--judge-*``); ``oric_bench_r1`` with the training reward's grader
:func:`rewards.graders.grade_tagged_yes_no` (the yes/no inside one ``<SOLUTION>`` block; anything else
is unverifiable, as in training, and no judge rescues it).

Metrics follow the official ``evaluate.py``: per-class (yes/no) precision, recall and F1, their macro
averages, and the yes-proportion of the predictions, in percent. An answer the grader cannot resolve is
neither yes nor no: it lowers the recall of its true class and counts in the yes-proportion's denominator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from core.prompts import with_r1_instruction
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.metrics import prf_from_counts
from rewards.graders import extract_yes_no, grade_tagged_yes_no
from rewards.oric import ORIC_FIELDS, check_oric_record

LABELS = ("no", "yes")
PROMPT_FIG7 = "Question: {question}\nPlease answer the question based on the given image."
PROMPT_FIG12_COT = (
    "Question: {question}\nLet's think step-by-step and then answer the question based on the given image."
)
PAPER_MAX_NEW_TOKENS = 1024  # "temperature 0 and a 1,024-token limit" (Sec. 4.1)
SIZES = ("small", "medium", "large")


class OricBench(Benchmark):
    name = "oric_bench"
    limit_strata = ("label",)  # the yes and the no questions; a question's paraphrases kept whole
    answer_format = "yes_no"
    default_max_new_tokens = PAPER_MAX_NEW_TOKENS
    template = PROMPT_FIG7  # the user turn's text around each question
    grader = staticmethod(extract_yes_no)  # answer text -> "yes" / "no" / None
    data_layout = "oric/oric_bench.json (official release or `veritune build oric-bench`), images in coco/val2014/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "oric" / "oric_bench.json", data_root / "coco" / "val2014"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data = read_json(data_path, what="ORIC-Bench file")
        if not isinstance(data, list):
            raise UserError(f"{data_path}: expected a JSON list of {{{', '.join(ORIC_FIELDS)}}} records")
        root = Path(image_root) if image_root else Path(data_path).parent
        items = []
        for row, record in enumerate(data):
            label = check_oric_record(record, f"{data_path}: row {row}")
            questions = record["problem"] if isinstance(record["problem"], list) else [record["problem"]]
            image = root / record["image"]
            for index, question in enumerate(questions):
                items.append(
                    self.image_item(
                        f"{record['id']}/p{index}",
                        self.template.format(question=question),
                        image,
                        {
                            "label": label,
                            "paraphrase": index,
                            "object_size": record.get("object_size"),
                            "target_object": record["target_object"],
                            "question": question,
                        },
                    )
                )
        return items

    def item_correct(self, item: EvalItem, prediction: str) -> bool:
        """The benchmark's grader reads the label from the answer (unresolved is never correct)."""
        return not item.missing_images and self.grader(prediction) == item.meta["label"]

    def counts(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[Hashable, int]:
        """Per paraphrase, the items by true label and graded answer (``("n", paraphrase, label, answer)``, the
        answer None when unresolved or the image is missing) and the "yes" questions by object size and whether
        they were answered "yes" (``("size", paraphrase, size, hit)``); plus ``resolved``, ``unresolved`` and
        ``missing_images``."""
        tally: Counter[Hashable] = Counter()
        for item in items:
            answer = None if item.missing_images else self.grader(predictions.get(item.id))
            tally["missing_images"] += bool(item.missing_images)
            tally["resolved"] += answer is not None
            tally["unresolved"] += answer is None and not item.missing_images
            paraphrase, label = item.meta["paraphrase"], item.meta["label"]
            tally["n", paraphrase, label, answer] += 1
            if label == "yes" and item.meta.get("object_size") in SIZES:
                tally["size", paraphrase, item.meta["object_size"], answer == "yes"] += 1
        return dict(tally)

    def metrics_from_counts(self, counts: Mapping[Hashable, int]) -> dict[str, float]:
        return self._summary(counts)[0]

    def _summary(self, counts: Mapping[Hashable, int]) -> tuple[dict[str, float], dict[Any, dict[str, float]]]:
        """The metrics (each paraphrase's, as the official ``evaluate.py`` computes them, and their mean over
        the paraphrases present) and the per-paraphrase metrics, from :meth:`counts`' tallies."""
        cells: dict[Any, dict[tuple[Any, Any], int]] = {}  # paraphrase -> (label, answer) -> items
        sizes: dict[Any, dict[tuple[str, bool], int]] = {}
        for key, count in counts.items():
            if isinstance(key, tuple) and count:
                (cells if key[0] == "n" else sizes).setdefault(key[1], {})[key[2:]] = count
        per_paraphrase = {index: _metrics(cells[index], sizes.get(index, {})) for index in sorted(cells)}
        # every paraphrase has the official metrics; a size's recall is averaged over the paraphrases that asked
        # a "yes" question of that size (a partial evaluation may have answered one paraphrase's and not another's)
        keys = dict.fromkeys(key for values in per_paraphrase.values() for key in values)
        metrics = {}
        for key in keys:
            held = [values[key] for values in per_paraphrase.values() if key in values]
            metrics[key] = sum(held) / len(held)
        for index, values in per_paraphrase.items():
            metrics.update(
                {
                    f"p{index}/{key}": value
                    for key, value in values.items()
                    if key.startswith("macro") or key == "yes_proportion"
                }
            )
        return metrics, per_paraphrase

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        counts = self.counts(items, predictions)
        metrics, per_paraphrase = self._summary(counts)
        confusion_rows = []
        for label in LABELS:
            row = {"true": label}
            for column, answer in (("pred_no", "no"), ("pred_yes", "yes"), ("unresolved", None)):
                row[column] = sum(
                    count
                    for key, count in counts.items()
                    if isinstance(key, tuple) and key[0] == "n" and key[2] == label and key[3] == answer
                )
            confusion_rows.append(row)
        return {
            "metrics": metrics,
            "tables": {
                "per_paraphrase": [{"paraphrase": i, **m} for i, m in per_paraphrase.items()],
                "confusion": confusion_rows,
            },
            "counts": {
                "items": len(items),
                "questions": len(items) // max(len(per_paraphrase), 1),
                "resolved": counts.get("resolved", 0),
                "unresolved": counts.get("unresolved", 0),
                "missing_images": counts.get("missing_images", 0),
            },
        }


def _metrics(cells: dict[tuple[Any, Any], int], sizes: dict[tuple[str, bool], int]) -> dict[str, float]:
    """One paraphrase's metrics from its items by (true label, graded answer) and its "yes" questions by (object
    size, answered "yes")."""
    out: dict[str, float] = {}
    for label in LABELS:
        prf = prf_from_counts(
            cells.get((label, label), 0),
            sum(count for (_, answer), count in cells.items() if answer == label),
            sum(count for (truth, _), count in cells.items() if truth == label),
        )
        out.update({f"{label}/{k}": 100 * v for k, v in prf.items() if k != "support"})
    for k in ("precision", "recall", "f1"):
        out[f"macro/{k}"] = (out[f"yes/{k}"] + out[f"no/{k}"]) / 2
    total = sum(cells.values())
    yes = sum(count for (_, answer), count in cells.items() if answer == "yes")
    out["yes_proportion"] = 100 * yes / total if total else 0.0
    for size in SIZES:  # recall of "yes" questions by object size, when the file records sizes
        asked = sizes.get((size, True), 0) + sizes.get((size, False), 0)
        if asked:
            out[f"yes_recall_{size}"] = 100 * sizes.get((size, True), 0) / asked
    return out


class OricBenchCot(OricBench):
    """ORIC-Bench with the zero-shot chain-of-thought prompt of Fig. 12 (the paper's CoT baseline)."""

    name = "oric_bench_cot"
    template = PROMPT_FIG12_COT


class OricBenchR1(OricBench):
    """ORIC-Bench asked with the R1-style instruction of the Visual-RFT training prompt (ORIC Fig. 11), for
    models trained with it, and graded by the training reward's grader (:func:`grade_tagged_yes_no`)."""

    name = "oric_bench_r1"
    answer_format = ""  # graded as in training: no judge resolves an answer outside the <SOLUTION> block
    template = with_r1_instruction("{question}")
    grader = staticmethod(grade_tagged_yes_no)
