"""AMBER discriminative (official ``query/query_discriminative*.json`` and ``annotations.json``).

Scored as the official ``inference.py`` (junyangwang0410/AMBER) scores it: the ground truth of question
``id`` is the annotation at position ``id - 1``; a response counts as an answer only when it is exactly
``Yes`` or ``No`` (compared as strings, nothing stripped); "no" is the positive class; every counter's
denominator starts at 0.001 (``metrics.txt``); accuracy, precision and recall are rounded to one decimal
and F1 is computed from those rounded values with the official small constant in its denominator (0.001
for existence, 0.0001 elsewhere) and rounded again, so every figure equals the printed one. Groups:
overall, existence (``discriminative-hallucination``), attribute (state + number + action, counters
summed), state, number, action, relation.

veritune step before it (documented, recorded): a response that is not exactly ``Yes``/``No`` is read
by the shared yes/no grader :func:`rewards.graders.extract_yes_no` and replaced by ``Yes``/``No`` when
it resolves ("Yes." -> ``Yes``); unresolved ones stay as they are (never correct). The shares of exact,
normalised and unresolved responses are in ``answer_normalisation`` and the metrics
(``normalisation/*_share``). With ``--strict-official`` this step is skipped and the raw responses are
scored, as ``inference.py`` does: "Yes."/"No." then score 0. A question with no response (or whose image
is missing) is scored as a non-answer; officially a question absent from the response file is not
counted. The generative task is ``amber_generative.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.base import Benchmark, EvalItem
from rewards.graders import extract_yes_no

TYPES = {
    "discriminative-hallucination": "existence",
    "discriminative-attribute-state": "attribute_state",
    "discriminative-attribute-number": "attribute_number",
    "discriminative-attribute-action": "attribute_action",
    "discriminative-relation": "relation",
}
EPSILON = 0.001  # the official counters start here (metrics.txt)
F1_CONSTANT = {"existence": 0.001}  # inference.py adds 0.001 to the existence F1's denominator, 0.0001 to every other
DEFAULT_F1_CONSTANT = 0.0001
ATTRIBUTE_TYPES = ("attribute_state", "attribute_number", "attribute_action")
GROUP_ORDER = ("existence", "attribute", *ATTRIBUTE_TYPES, "relation")
COUNTERS = ("correct_num", "correct_score", "no_num", "no_score", "ans_no_num", "ans_no_score")


def official_counters(pairs: list[tuple[str, str]]) -> dict[str, float]:
    """``inference.py``'s counters over ``(truth, response)`` pairs: only the exact strings "Yes"/"No" are answers."""
    counters = {name: EPSILON if name.endswith("_num") else 0.0 for name in COUNTERS}
    for truth, response in pairs:
        counters["correct_num"] += 1
        if truth == "yes":
            counters["correct_score"] += response == "Yes"
        else:
            counters["no_num"] += 1
            counters["correct_score"] += response == "No"
            counters["no_score"] += response == "No"
        if response == "No":
            counters["ans_no_num"] += 1
            counters["ans_no_score"] += truth == "no"
    return counters


def official_metrics(counters: dict[str, float], f1_constant: float = DEFAULT_F1_CONSTANT) -> dict[str, float]:
    """Accuracy, precision, recall and F1 exactly as ``inference.py`` prints them (one decimal; F1 from the
    rounded precision and recall)."""
    accuracy = round(counters["correct_score"] / counters["correct_num"] * 100, 1)
    precision = round(counters["ans_no_score"] / counters["ans_no_num"] * 100, 1)
    recall = round(counters["no_score"] / counters["no_num"] * 100, 1)
    f1 = round(2 * (precision / 100) * (recall / 100) / ((precision / 100) + (recall / 100) + f1_constant) * 100, 1)
    return {"accuracy": accuracy, "precision": precision, "recall": recall, "f1": f1}


def normalise_response(text: str | None, strict: bool) -> tuple[str | None, str]:
    """The response as scored, and what happened to it: ``exact`` (already Yes/No), ``normalised``
    (veritune's step turned it into Yes/No), ``unresolved``, or ``unanswered``."""
    if text is None:
        return None, "unanswered"
    if text in ("Yes", "No"):
        return text, "exact"
    if strict:
        return text, "unresolved"
    label = extract_yes_no(text)
    return (label.capitalize(), "normalised") if label else (text, "unresolved")


def _find_annotations(query_file: Path) -> Path:
    for candidate in (query_file.parent / "annotations.json", query_file.parent.parent / "annotations.json"):
        if candidate.is_file():
            return candidate
    raise UserError(f"{query_file}: AMBER's annotations.json not found beside it or one folder up")


class AmberDiscriminative(Benchmark):
    name = "amber_discriminative"
    limit_strata = ("type",)  # existence, attribute (state, number, action), relation
    default_max_new_tokens = 16
    answer_format = "yes_no"  # the normalisation step's grader; lets a judge read what it leaves unresolved
    data_layout = "amber/query/query_discriminative.json + amber/annotations.json (official), images in amber/image/"

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "amber" / "query" / "query_discriminative.json", data_root / "amber" / "image"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        queries = read_json(data_path, what="AMBER query file")
        annotations = read_json(_find_annotations(data_path), what="AMBER annotations")
        root = Path(image_root) if image_root else data_path.parent
        items = []
        for row, query in enumerate(queries if isinstance(queries, list) else []):
            if not isinstance(query, dict) or not {"id", "image", "query"} <= query.keys():
                raise UserError(f"{data_path}: row {row}: expected AMBER fields id, image, query")
            truth = annotations[query["id"] - 1] if 0 < query["id"] <= len(annotations) else None
            if not isinstance(truth, dict) or "truth" not in truth:
                raise UserError(f"{data_path}: row {row}: id {query['id']} has no discriminative annotation")
            image = root / query["image"]
            items.append(
                self.image_item(
                    str(query["id"]),
                    query["query"],
                    image,
                    {"truth": truth["truth"], "type": TYPES.get(truth["type"], "relation")},
                )
            )
        if not items:
            raise UserError(f"{data_path}: expected a JSON list of AMBER queries (id, image, query)")
        return items

    def score(
        self, items: list[EvalItem], predictions: dict[str, str], *, strict_official: bool = False
    ) -> dict[str, Any]:
        strict = strict_official
        steps = {"exact": 0, "normalised": 0, "unresolved": 0, "unanswered": 0}
        pairs: dict[str, list[tuple[str, str]]] = {name: [] for name in ("all", *TYPES.values())}
        for item in items:
            text = None if item.missing_images else predictions.get(item.id)
            response, step = normalise_response(text, strict)
            steps[step] += 1
            pair = (item.meta["truth"], response or "")
            pairs["all"].append(pair)
            pairs[item.meta["type"]].append(pair)
        counters = {name: official_counters(members) for name, members in pairs.items()}
        # the attribute group sums the three attribute types' counters, as officially
        counters["attribute"] = {key: sum(counters[t][key] for t in ATTRIBUTE_TYPES) for key in COUNTERS}
        sizes = {name: len(members) for name, members in pairs.items()}
        sizes["attribute"] = sum(sizes[t] for t in ATTRIBUTE_TYPES)
        metrics: dict[str, float] = dict(official_metrics(counters["all"]))
        table = [{"type": "all", "questions": sizes["all"], **metrics}]
        for group in GROUP_ORDER:
            if sizes[group]:
                values = official_metrics(counters[group], F1_CONSTANT.get(group, DEFAULT_F1_CONSTANT))
                table.append({"type": group, "questions": sizes[group], **values})
                metrics.update({f"{group}/{k}": v for k, v in values.items()})
        total = len(items) or 1
        normalisation = {
            "mode": "strict_official" if strict else "veritune_yes_no",
            "rule": "raw responses, only exact 'Yes'/'No' count (inference.py)"
            if strict
            else "exact 'Yes'/'No' kept; other responses read by rewards.graders.extract_yes_no -> 'Yes'/'No'",
            **steps,
            **{f"{k}_share": 100 * v / total for k, v in steps.items()},
        }
        metrics.update({f"normalisation/{k}_share": 100 * v / total for k, v in steps.items()})
        return {
            "metrics": metrics,
            "tables": {"by_type": table},
            "answer_normalisation": normalisation,
            "counts": {"items": len(items), "missing_images": sum(bool(i.missing_images) for i in items)},
        }
