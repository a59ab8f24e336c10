"""Classification metrics shared by the yes/no benchmarks, with every empty class guarded (0.0, never a
division by zero)."""

from __future__ import annotations


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def f1(precision: float, recall: float) -> float:
    return ratio(2 * precision * recall, precision + recall)


def prf_from_counts(tp: int, predicted_positive: int, support: int) -> dict[str, float]:
    """Precision, recall and F1 of one class from its counts: true positives, predictions of the class (an answer
    outside the label set is none), its support."""
    precision, recall = ratio(tp, predicted_positive), ratio(tp, support)
    return {"precision": precision, "recall": recall, "f1": f1(precision, recall), "support": float(support)}
