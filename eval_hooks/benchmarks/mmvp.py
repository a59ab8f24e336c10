"""MMVP (tsb0601/MMVP): 150 image pairs, 300 questions, two per pair, CLIP-blind pairs.

Release layout (the MMVP/MMVP dataset): ``Questions.csv`` with columns ``Question``, ``Options`` (e.g.
``(a) Open (b) Closed``) and ``Correct Answer`` (e.g. ``(a)``), and ``MMVP Images/<i+1>.jpg`` for row
*i*; rows 2k and 2k+1 are the two questions of pair k. The prompt is ``scripts/evaluate_mllm.py``'s:
the question, a space, the options.

Scoring follows ``scripts/gpt_grader.py``: with an LLM judge (``--llm-base-url/--llm-model``) each
answer is graded by the judge with the official grader prompt and system message (temperature 0.2) and
credited only on a reply of exactly "yes"; a pair counts only when both of its questions are credited.
Pair accuracy is the official metric; per-question accuracy is also reported. Without a judge
(veritune's rule-based mode, recorded as ``grading: rules``), the option letter is read by the shared
option grader (``(a)``, "a", "the answer is (b)", or one option's text) and compared with the correct
letter. Deviations: generation is greedy with a budget of 128 new tokens (the official script samples at
temperature 0.2 with up to 1,024); the judge is the configured endpoint, not GPT-4-0314. A pair cut by
``--limit`` is left out of the pair accuracy; an item whose image is missing is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_table
from eval_hooks.answers import extract_option
from eval_hooks.base import EvalItem, RubricJudged, release_file_paths
from rewards.graders import YesNo, completion_text

FIELDS = ("Question", "Options", "Correct Answer")
JUDGE_SYSTEM = (
    "You are a helpful and precise assistant for checking the quality of the answer. Please answer in only yes or no."
)
JUDGE_PROMPT = (
    "Given the following question {question}, the correct answer is {correct_answer}. "
    "Does the following answer correctly answers the question, answer:{response}?"
)
_OPTION = re.compile(r"\(([a-zA-Z])\)\s*(.*?)\s*(?=\([a-zA-Z]\)|\Z)", re.DOTALL)
JUDGED = {
    "yes": "[judge] credited",
    "no": "[judge] not credited",
    None: "[judge] undetermined",
}  # what the scorer reads


def parse_options(text: str) -> dict[str, str]:
    """``"(a) Open (b) Closed"`` -> ``{"A": "Open", "B": "Closed"}``."""
    return {letter.upper(): option for letter, option in _OPTION.findall(text)}


class Mmvp(RubricJudged):  # with a judge: the official GPT grader replaces the rule-based letter reading
    name = "mmvp"
    default_max_new_tokens = 128
    answer_format = "option"
    judge_temperature = 0.2
    data_layout = "mmvp/Questions.csv with images in 'mmvp/MMVP Images/<row+1>.jpg' (official)"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "mmvp" / "Questions.csv", data_root / "mmvp" / "MMVP Images"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path, root = release_file_paths(data_path, image_root, "Questions.csv", "MMVP Images")
        rows = read_table(data_path, what="MMVP Questions.csv")
        items = []
        for index, row in enumerate(rows):
            if not set(FIELDS) <= row.keys():
                raise UserError(f"{data_path}: row {index + 1}: expected MMVP columns {', '.join(FIELDS)}")
            options = parse_options(str(row["Options"]))
            answer = parse_options(str(row["Correct Answer"]) + " x")
            if len(options) < 2 or len(answer) != 1 or next(iter(answer)) not in options:
                raise UserError(
                    f"{data_path}: row {index + 1}: Options {row['Options']!r} / "
                    f"Correct Answer {row['Correct Answer']!r} "
                    "are not in the '(a) ... (b) ...' / '(a)' form"
                )
            image = root / f"{index + 1}.jpg"
            items.append(
                self.image_item(
                    str(index + 1),
                    f"{row['Question']} {row['Options']}",
                    image,
                    {
                        "question": f"{row['Question']} {row['Options']}",
                        "options": options,
                        "answer": next(iter(answer)),
                        "correct_answer": str(row["Correct Answer"]),
                        "pair": index // 2,
                    },
                )
            )
        return items

    # the official grader, through eval_hooks/judge.py's rubric mode
    def judge_request(self, item: EvalItem, prediction: str) -> tuple[str, str]:
        return JUDGE_PROMPT.format(
            question=item.meta["question"], correct_answer=item.meta["correct_answer"], response=prediction
        ), JUDGE_SYSTEM

    def judge_verdict(self, item: EvalItem, reply: str) -> str | None:
        grade = mmvp_judge_grade(reply)
        return None if grade is None else JUDGED[grade]

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        judged = any(str(predictions.get(item.id)).startswith("[judge] ") for item in items)
        correct = {}
        for item in items:
            text = predictions.get(item.id)
            if item.missing_images or text is None:
                correct[item.id] = False
            elif judged:
                correct[item.id] = text == JUDGED["yes"]
            else:
                correct[item.id] = extract_option(text, item.meta["options"])[0] == item.meta["answer"]
        pairs: dict[int, list[bool]] = {}
        for item in items:
            pairs.setdefault(item.meta["pair"], []).append(correct[item.id])
        complete = {pair: flags for pair, flags in pairs.items() if len(flags) == 2}
        metrics = {
            "pair_accuracy": 100 * sum(all(flags) for flags in complete.values()) / len(complete) if complete else 0.0,
            "question_accuracy": 100 * sum(correct.values()) / len(items) if items else 0.0,
        }
        rows = [
            {"pair": pair + 1, "questions": f"{2 * pair + 1},{2 * pair + 2}", "both_right": all(flags)}
            for pair, flags in complete.items()
        ]
        counts = {
            "items": len(items),
            "pairs": len(complete),
            "incomplete_pairs": len(pairs) - len(complete),
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {
            "metrics": metrics,
            "tables": {"per_pair": rows[:200]},
            "counts": counts,
            "grading": "judge" if judged else "rules",
        }


# ---- MMVP's official reading of the grader's reply


_STRICT_JUDGE_YES_NO = re.compile(r"^(yes|no)$", re.IGNORECASE)


def mmvp_judge_grade(reply: Any) -> YesNo | None:
    """MMVP's ``gpt_grader.py`` reading of the grader's reply: exactly "yes" or "no" (any case, nothing
    around it); anything else is undetermined (None: the answer is not credited)."""
    text = completion_text(reply) or ""
    return text.lower() if _STRICT_JUDGE_YES_NO.match(text) else None  # type: ignore[return-value]
