"""What every benchmark provides, and what the runner consumes.

A benchmark is data plus a little code: a loader for its official release format that yields
:class:`EvalItem` objects (prompt text, image paths, generation budget, what the scorer needs), and a
scorer that is a pure function of ``(items, predictions)`` so any predictions file can be re-scored
without a model. The runner (``eval_hooks/runner.py``) only sees :class:`EvalItem`.
"""

from __future__ import annotations

import functools
import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError

PARAPHRASE_ID = re.compile(r"^(.*)/p\d+$")  # "17/p2": question 17 asked with its third paraphrase


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


def release_file_paths(
    data_path: Path, image_root: Path | None, file_name: str, images: str = "images"
) -> tuple[Path, Path]:
    """The official release file (``data_path``, or ``file_name`` inside it when it is a folder) and the image
    folder (``image_root``, else ``images`` beside the file)."""
    data_path = Path(data_path)
    if data_path.is_dir():
        data_path = data_path / file_name
    return data_path, Path(image_root) if image_root else data_path.parent / images


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
    # A limit (``--limit``, ``name:N``; eval_hooks/selection.py) counts questions (a question's paraphrases
    # once), or with ``limit_by_pair`` the q+/q- pairs of ``meta["pair"]``. Its stratified sample spreads the
    # limit over the strata (the values of these meta keys, e.g. POPE's ``subset``) and takes whole groups
    # (items sharing these meta keys' values; none: ``meta["pair"]`` when there is one, else the question).
    limit_by_pair: bool = False
    limit_strata: tuple[str, ...] = ()
    limit_groups: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A ``score`` written without the ``strict_official`` parameter (a benchmark with no veritune step
        before its official rule, so the flag changes nothing) is given one, ignored: every benchmark is
        scored by the same call."""
        super().__init_subclass__(**kwargs)
        score = cls.__dict__.get("score")
        if score is None or getattr(score, "__isabstractmethod__", False):
            return
        if "strict_official" not in inspect.signature(score).parameters:

            @functools.wraps(score)
            def score_ignoring_strict(
                self: Benchmark, items: list[EvalItem], predictions: dict[str, str], *, strict_official: bool = False
            ) -> dict[str, Any]:
                return score(self, items, predictions)

            cls.score = score_ignoring_strict  # type: ignore[method-assign]

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        """``(data_path, image_root)`` of the benchmark's files under a data root."""
        return data_root / self.name, data_root / self.name / "images"

    def limit_unit(self, item: EvalItem) -> str:
        """What a limit counts once: the item's question (its paraphrases together), or its pair."""
        if self.limit_by_pair and "pair" in item.meta:
            return f"pair:{item.meta['pair']}"
        match = PARAPHRASE_ID.match(item.id)
        return match.group(1) if match else item.id

    def limit_stratum(self, item: EvalItem) -> str:
        """The item's stratum for a limit's stratified sample ("" for a benchmark without strata)."""
        return "/".join(str(item.meta.get(key)) for key in self.limit_strata)

    def limit_group(self, item: EvalItem) -> str:
        """The items a limit keeps or drops together (a question pair, a figure set, a question's paraphrases)."""
        if self.limit_groups:
            return "/".join(str(item.meta.get(key)) for key in self.limit_groups)
        if "pair" in item.meta:
            return f"pair:{item.meta['pair']}"
        return self.limit_unit(item)

    def image_item(self, item_id: str, prompt: str, image: Path, meta: dict[str, Any]) -> EvalItem:
        """One item asking ``prompt`` about ``image`` with the benchmark's budget (a missing image is marked)."""
        return EvalItem(
            id=item_id,
            prompt=prompt,
            images=[image],
            max_new_tokens=self.default_max_new_tokens,
            meta=meta,
            missing_images=[] if image.is_file() else [image],
        )

    def item_correct(self, item: EvalItem, prediction: str) -> bool | None:
        """Whether ``prediction`` answers ``item`` rightly by this benchmark's own grader (the sample table's
        ``correct``); None where the scorer gives no per-item verdict. A benchmark whose scorer reads each
        answer with its own rule overrides this with that rule; with an ``answer_format`` and no override,
        the shared rule-based grader decides (``eval_hooks.evaluate.sample_rows``)."""
        return None

    def counts(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[Hashable, int] | None:
        """Integer tallies of ``items`` from which :meth:`metrics_from_counts` gives the metrics :meth:`score`
        gives (by default scoring), and which add up: the tallies of two disjoint sets of bootstrap units (a
        question with its paraphrases, a q+/q- pair) sum to those of their union, a unit drawn twice counting
        twice. A paired bootstrap then sums tallies per draw instead of scoring it (eval_hooks/bootstrap.py),
        with the same floats. ``None`` (the default): the metrics are not such a function; each draw is scored.
        """
        return None

    def metrics_from_counts(self, counts: Mapping[Hashable, int]) -> dict[str, float]:
        """``score(items, predictions)["metrics"]`` from ``counts(items, predictions)``; a tally of 0 is the same
        as an absent one. Implemented where :meth:`counts` is."""
        raise NotImplementedError(f"{self.name}: no metrics from counts")

    @abstractmethod
    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        """Read the benchmark's official release file(s) at ``data_path``; images under ``image_root``."""

    @abstractmethod
    def score(
        self, items: list[EvalItem], predictions: dict[str, str], *, strict_official: bool = False
    ) -> dict[str, Any]:
        """Score ``predictions`` (item id -> generated text) against ``items``; never loads a model.

        ``strict_official`` (``--strict-official``): score the raw responses with no veritune step before the
        official rule. A benchmark without such a step may leave the parameter out (see ``__init_subclass__``).
        """


class RubricJudged(Benchmark):
    """A benchmark whose answers an LLM judge grades with the benchmark's official rubric (``judge_mode``
    "rubric", run by :mod:`eval_hooks.judge`): :meth:`judge_request` is the judge's request for one answer,
    :meth:`judge_verdict` turns its reply into the ``[judge] ...`` text the scorer reads. With
    ``requires_judge`` the benchmark cannot be scored without a judge (``--llm-base-url``, ``--llm-model``)."""

    judge_mode = "rubric"
    requires_judge = False
    judge_temperature = 0.0
    judge_max_tokens: int | None = None  # None: the request sets no limit
    title = ""  # the benchmark's name as its authors write it, for messages (default: ``name``)

    @abstractmethod
    def judge_request(self, item: EvalItem, prediction: str) -> tuple[str, str | None]:
        """The judge's user message about ``prediction`` and its system message (None: no system message)."""

    @abstractmethod
    def judge_verdict(self, item: EvalItem, reply: str) -> str | None:
        """What the scorer reads for the judge's ``reply`` (``[judge] ...``); None when it cannot be read."""

    def judged_prediction(self, item: EvalItem, predictions: dict[str, str], *, prefix: str, what: str) -> str:
        """The judge's text for ``item`` ("" when unanswered); a model's own answer where the judge's ``what``
        (starting with ``prefix``) belongs is a one-line error: this benchmark is scored by the judge."""
        text = predictions.get(item.id, "")
        if text and not item.missing_images and not text.startswith(prefix):
            raise UserError(
                f"{self.name}: item {item.id}: not a judge {what}; "
                f"{self.title or self.name} is scored by an LLM judge (--llm-base-url, --llm-model)"
            )
        return text
