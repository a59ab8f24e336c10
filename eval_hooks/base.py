"""What every benchmark provides, and what the runner consumes.

A benchmark is data plus a little code: a loader for its official release format that yields
:class:`EvalItem` objects (prompt text, image paths, generation budget, what the scorer needs), and a
scorer that is a pure function of ``(items, predictions)`` so any predictions file can be re-scored
without a model. The runner (``eval_hooks/runner.py``) only sees :class:`EvalItem`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class EvalItem:
    """One generation request of a benchmark.

    Attributes:
        id: unique within the benchmark (a question asked with several paraphrases gives several items,
            e.g. ``"17/p2"``); predictions files are keyed by it.
        prompt: the user turn's text; the images come before it in the same turn.
        images: image files, in order (empty for image-free questions such as HallusionBench's).
        max_new_tokens: the generation budget for this item.
        meta: whatever the scorer needs (label, category, paraphrase index, object size, ...).
        missing_images: image paths that do not exist; such an item is never generated and never
            scored as correct.
    """

    id: str
    prompt: str
    images: list[Path] = field(default_factory=list)
    max_new_tokens: int = 64
    meta: dict[str, Any] = field(default_factory=dict)
    missing_images: list[Path] = field(default_factory=list)


class Benchmark(ABC):
    """Base class of a benchmark: subclasses set ``name`` and implement :meth:`load` and :meth:`score`.

    ``score`` returns a JSON-serialisable dict with at least:
        ``metrics``: flat ``{name: float}`` logged as ``eval/<benchmark>/<name>``;
        ``tables``: ``{table_name: [row dicts]}`` for per-category breakdowns;
        ``counts``: item counts (scored, missing images, unresolved answers, ...).
    """

    name: str = ""
    default_max_new_tokens: int = 64
    data_layout: str = ""  # where the files sit under --data-root (documented in docs/EVALUATION.md)
    # What an answer is ("yes_no", "option", "count"): lets the optional LLM judge resolve the answers the
    # rule-based grader cannot (eval_hooks/judge.py). Empty: the official parser decides every answer.
    answer_format: str = ""
    # Set by the scorer for ``--strict-official``: score the raw responses with no veritune step before the
    # official rule.
    strict_official: bool = False

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        """``(data_path, image_root)`` of the benchmark's files under a data root."""
        return data_root / self.name, data_root / self.name / "images"

    @abstractmethod
    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        """Read the benchmark's official release file(s) at ``data_path``; images under ``image_root``."""

    @abstractmethod
    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        """Score ``predictions`` (item id -> generated text) against ``items``; never loads a model."""
