"""Classification metrics shared by the yes/no benchmarks, with every empty class guarded (0.0, never a
division by zero)."""

from __future__ import annotations

from collections.abc import Sequence


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def f1(precision: float, recall: float) -> float:
    return ratio(2 * precision * recall, precision + recall)


def per_class_prf(truth: Sequence[str], predicted: Sequence[str | None], label: str) -> dict[str, float]:
    """Precision, recall and F1 of one class. A prediction outside the label set counts against recall."""
    tp = sum(t == label and p == label for t, p in zip(truth, predicted))
    predicted_positive = sum(p == label for p in predicted)
    support = sum(t == label for t in truth)
    return prf_from_counts(tp, predicted_positive, support)


def prf_from_counts(tp: int, predicted_positive: int, support: int) -> dict[str, float]:
    """:func:`per_class_prf` from the class's counts: true positives, predictions of the class, its support."""
    precision, recall = ratio(tp, predicted_positive), ratio(tp, support)
    return {"precision": precision, "recall": recall, "f1": f1(precision, recall), "support": float(support)}


def confusion(truth: Sequence[str], predicted: Sequence[str | None], labels: Sequence[str]) -> list[list[int]]:
    """Rows are true labels, columns predicted labels, plus a last column for unresolved answers."""
    columns = [*labels, None]
    return [
        [sum(t == row and (p if p in labels else None) == col for t, p in zip(truth, predicted)) for col in columns]
        for row in labels
    ]
