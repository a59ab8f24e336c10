"""What a result covers (answered / expected items, the questions or pairs they are, missing images, the share
of unresolved answers) and the refusals that guard it: partial predictions, missing images, mostly unresolved
answers (above :data:`UNRESOLVED_LIMIT`), each with its opt-in (``--allow-partial`` / ``eval_allow_partial``,
``--allow-unresolved``)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from core.errors import UserError
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.prepare import PreparedBenchmark
from eval_hooks.selection import unit_name

logger = logging.getLogger("veritune.eval")


SHOWN = 5  # ids or paths an error message names
ALLOW_PARTIAL = "--allow-partial"  # the CLI's opt-in; the recipes' is eval_allow_partial (eval_hooks/callback.py)
ALLOW_UNRESOLVED = "--allow-unresolved"  # the CLI's opt-in to score a mostly unresolved result (labelled)
# Above this share (percent) of unresolved answers a result is refused (check_unresolved): more answers unread
# than read means the metrics measure the answer format, not the model. A model that answers in the format
# but often hedges stays below it; a cut-off budget or an unreadable judge is near 100%.
UNRESOLVED_LIMIT = 50.0


def coverage_of(
    items: list[EvalItem], predictions: dict[str, str], benchmark: Benchmark | None = None
) -> dict[str, Any]:
    """How much of the benchmark ``predictions`` cover: ``expected`` (the items, after the run's limit),
    ``answered`` and ``unanswered`` (with their share in percent), ``missing_images`` (items whose images are
    missing or unreadable; they are never generated) and ``partial`` (not every item answered), with the first
    unanswered ids and missing image paths; ``units`` and ``unit``: what those items are in the unit a limit
    counts (16 ``question``s asked in 4 paraphrases each are 64 items; ``pair``s for ``finer_yn``).
    ``unresolved`` and ``unresolved_share`` (answers no grader could read) are filled in by
    :func:`eval_hooks.evaluate.score_benchmark`, which refuses a share above ``unresolved_limit``
    (:func:`check_unresolved`) or, allowed, sets ``mostly_unresolved``."""
    unanswered = [item.id for item in items if item.id not in predictions]
    missing_paths = sorted({str(path) for item in items for path in item.missing_images})
    expected = len(items)
    answered = expected - len(unanswered)
    coverage: dict[str, Any] = {
        "expected": expected,
        "answered": answered,
        "unanswered": len(unanswered),
        "answered_share": 100 * answered / expected if expected else 0.0,
        "missing_images": sum(bool(item.missing_images) for item in items),
        "missing_image_files": len(missing_paths),
        "unresolved": None,
        "unresolved_share": None,
        "unresolved_limit": UNRESOLVED_LIMIT,
        "mostly_unresolved": False,
        "partial": answered < expected,
        "first_unanswered": unanswered[:SHOWN],
        "first_missing_images": missing_paths[:SHOWN],
    }
    if benchmark is not None:
        coverage["unit"] = unit_name(benchmark)
        coverage["units"] = len({benchmark.limit_unit(item) for item in items})
    return coverage


def coverage_text(coverage: dict[str, Any]) -> str:
    """The coverage as every table prints it, naming what is counted: ``64/64 items (16 questions)`` (answered
    of expected items, then the limit's units when they are not the items), ``6/6 items``."""
    text = f"{coverage.get('answered', '?')}/{coverage.get('expected', '?')} items"
    units, unit = coverage.get("units"), coverage.get("unit")
    if isinstance(units, int) and unit and units != coverage.get("expected"):
        text += f" ({units} {unit}{'' if units == 1 else 's'})"
    return text


def benchmark_label(name: str, result: dict[str, Any]) -> str:
    """``name`` with the marks of a result that does not describe the benchmark: ``(partial)`` (scored on its
    answered items only) and ``(mostly unresolved)`` (most answers unread, scored anyway)."""
    marks = [mark for mark in ("partial", "mostly unresolved") if result.get(mark.replace(" ", "_"))]
    return f"{name} ({', '.join(marks)})" if marks else name


def check_images(
    prepared: list[PreparedBenchmark], *, opt_in: str = ALLOW_PARTIAL, where: str = "--image-root, --data-root, --data"
) -> None:
    """Refuse, before any model loads, a benchmark whose images are missing (a wrong image root draws all-zero
    metrics otherwise): one ``error:`` line with the counts and the first paths. With the benchmark's
    ``allow_partial`` (``opt_in``), a warning instead, unless no item has its images."""
    for entry in prepared:
        missing = [item for item in entry.items if item.missing_images]
        if not missing:
            continue
        paths = sorted({str(path) for item in missing for path in item.missing_images})
        what = (
            f"{entry.name}: {len(missing)} of {len(entry.items)} items have missing images ({len(paths)} image "
            f"file(s) not found{f' under {entry.image_root}' if entry.image_root else ''}, "
            f"first: {', '.join(paths[:SHOWN])})"
        )
        if len(missing) == len(entry.items):
            raise UserError(f"{what}; nothing can be answered: check {where}")
        if not entry.allow_partial:
            raise UserError(
                f"{what}; check {where}, or add {opt_in} to score only the items whose images are there "
                "(labelled partial)"
            )
        logger.warning("%s; scored without them (%s: labelled partial)", what, opt_in)


def unresolved_of(result: dict[str, Any], answered: int) -> tuple[int | None, float | None]:
    """The number and share (percent) of answers no grader could read: the answer resolution's, else the
    scorer's count; ``(None, None)`` for a benchmark without such a notion."""
    resolution = result.get("answer_resolution") or {}
    if resolution.get("unresolved_share") is not None:
        count = resolution.get("unresolved")
        share = float(resolution["unresolved_share"])
        return (int(count) if isinstance(count, (int, float)) else round(share * answered / 100)), share
    counts = result.get("counts", {})
    unresolved = counts.get("unresolved", counts.get("unresolved_scored_as_0"))
    if isinstance(unresolved, (int, float)) and not isinstance(unresolved, bool) and answered:
        return int(unresolved), 100 * unresolved / answered
    return None, None


def _unresolved_cause(benchmark: Benchmark, items: list[EvalItem], resolution: dict[str, Any] | None) -> str:
    """The likely cause of a high unresolved share, for the refusal's line: the judge, when one read the
    answers, else the generation budget or the answer format."""
    resolution = resolution or {}
    given = int(resolution.get("judge") or 0) + int(resolution.get("unresolved") or 0)
    if resolution.get("model") and resolution.get("applies", True) and given:  # an LLM judge read the answers
        return (
            f"the judge: {resolution['model']} gave a readable verdict on {resolution.get('judge', 0)} of the {given} "
            "answers it was sent (check --llm-model and --llm-base-url, and its replies in the cache)"
        )
    budgets = sorted({item.max_new_tokens for item in items})
    budget = budgets[0] if budgets else benchmark.default_max_new_tokens
    default = benchmark.default_max_new_tokens
    if budget < default:
        cut = f"--max-new-tokens {budget}, below {benchmark.name}'s default {default}"
    else:
        cut = f"--max-new-tokens {budget}; {benchmark.name}'s default is {default}"
    judge = " (an LLM judge, --llm-base-url/--llm-model, reads free-form answers)" if benchmark.answer_format else ""
    return f"answers cut off by the generation budget ({cut}) or not in {benchmark.name}'s answer format{judge}"


class UnresolvedAnswers(UserError):
    """A result refused because more of its answers than :data:`UNRESOLVED_LIMIT` are unresolved."""


def check_unresolved(
    benchmark: Benchmark,
    items: list[EvalItem],
    result: dict[str, Any],
    *,
    allow: bool,
    opt_in: str = ALLOW_UNRESOLVED,
) -> None:
    """Refuse a result whose unresolved share (``result["coverage"]``) is above :data:`UNRESOLVED_LIMIT`: its
    metrics would count every unread answer as wrong and describe the answer format, not the model (a GRPO
    model's reasoning cut off by a 3-token budget scores 0.00). With ``allow`` (``opt_in``), the result is
    kept and labelled ``mostly_unresolved`` (in the result and its coverage), with a warning.

    Raises:
        UnresolvedAnswers: the share is above the limit and ``allow`` is not set: one line with the share and
            the likely cause.
    """
    coverage = result["coverage"]
    share = coverage.get("unresolved_share")
    if share is None or share <= UNRESOLVED_LIMIT:
        return
    what = (
        f"{benchmark.name}: {coverage.get('unresolved')} of {coverage['answered']} answers ({share:.2f}%) are "
        f"unresolved (no grader could read them; the metrics count them wrong), above the {UNRESOLVED_LIMIT:g}% "
        f"limit; likely cause: {_unresolved_cause(benchmark, items, result.get('answer_resolution'))}"
    )
    if not allow:
        raise UnresolvedAnswers(f"{what}; add {opt_in} to score them anyway (labelled mostly unresolved)")
    coverage["mostly_unresolved"] = result["mostly_unresolved"] = True
    logger.warning("%s; scored anyway, labelled mostly unresolved", what)


def answered_items(
    name: str,
    items: list[EvalItem],
    predictions: dict[str, str],
    *,
    allow_partial: bool,
    opt_in: str = ALLOW_PARTIAL,
    benchmark: Benchmark | None = None,
) -> tuple[list[EvalItem], dict[str, Any]]:
    """The items to score and the coverage (:func:`coverage_of`). Every item must be answered; with
    ``allow_partial``, only the answered ones are scored (never an unanswered item as an answer). An answered
    item is scored whether its images are on disk now or not (they were there when it was answered).

    Raises:
        UserError: nothing answered (even with ``allow_partial``), or not everything without it: counts and
            the first unanswered ids (and missing image paths).
    """
    coverage = coverage_of(items, predictions, benchmark)
    if coverage["expected"] and not coverage["answered"]:
        raise UserError(
            f"{name}: none of the {coverage['expected']} items is answered by the predictions "
            f"(first expected ids: {', '.join(coverage['first_unanswered'])}); nothing to score"
        )
    if coverage["partial"] and not allow_partial:
        images = (
            f"; {coverage['missing_images']} items have missing images, first: "
            f"{', '.join(coverage['first_missing_images'])}"
            if coverage["missing_images"]
            else ""
        )
        raise UserError(
            f"{name}: the predictions answer {coverage['answered']} of {coverage['expected']} items "
            f"({coverage['unanswered']} unanswered, first: {', '.join(coverage['first_unanswered'])}{images}); "
            f"give predictions for every item (eval score: the run's selection, read from its metrics.json), or add "
            f"{opt_in} to score the "
            "answered items only (labelled partial)"
        )
    scored = [
        dataclasses.replace(item, missing_images=[]) if item.missing_images else item
        for item in items
        if item.id in predictions
    ]
    return scored, coverage
