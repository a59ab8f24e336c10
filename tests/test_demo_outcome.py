"""The embedded default's outcome, measured: `veritune demo` end to end on fixed seed 0, from nothing cached, both
halves in one run.

- The ORIC half (docs/LAB_NOTEBOOK_ARCHIVE.md#eighth-pass and the entries after it): the
  conventionally warm-started base answers POPE-random-style questions far better than ORIC-Bench's incongruous
  ones, and GRPO on ORIC's questions raises its ORIC-Bench macro-F1 (the paired bootstrap interval above zero),
  moves its yes-proportion toward 50 and keeps its POPE accuracy.
- The FINER half (miniature.finer_half; the FINER paper, arXiv 2603.17662, Sec. 1, Fig. 1): on a base that sees
  per-instance attributes, DPO on image-contrast pairs raises the yes/no probe's L3-L7 pairs (both twins right),
  keeps the positives (no trade of "yes" for "no") and keeps the base's POPE (the objects).

The bounds are the claims' (docs/RESULTS.md); the three seeds' values on each CPU kind measured are there too.
"""

from __future__ import annotations

import background_demo
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
GAP_MIN = 15.0  # base POPE accuracy minus ORIC-Bench macro-F1: the phenomenon (ORIC, arXiv 2509.15695, Sec. 1)
GAIN_MIN = 8.0  # ORIC-Bench macro-F1 after GRPO minus before, the 95% interval above 0 too
POPE_DROP_MAX = 3.0  # POPE accuracy points GRPO may cost
PAIRED_GAIN_MIN = 10.0  # FINER's L3-L7 pairs after DPO minus before, the 95% interval above 0 too
POSITIVES_DROP_MAX = 2.0  # positives' accuracy points DPO may cost
FINER_POPE_CHANGE_MAX = 3.0  # the FINER base's POPE accuracy, either way


@pytest.fixture(scope="module")
def demo() -> dict[str, object]:
    # started by conftest.py when the suite was collected, beside the other tests (tests/background_demo.py)
    return background_demo.start().result(timeout=3500)


def _row(demo: dict[str, object], benchmark: str, metric: str, trained_by: str = "grpo") -> dict[str, float]:
    rows = demo["results"]["rows"]  # type: ignore[index]
    return next(r for r in rows if (r["benchmark"], r["metric"], r["trained_by"]) == (benchmark, metric, trained_by))


def test_base_model_hallucinates_under_contextual_incongruity(demo: dict[str, object]) -> None:
    oric = _row(demo, "oric_bench", "macro/f1")
    pope = _row(demo, "pope", "accuracy")
    assert pope["base"] >= 70.0, pope  # the base model sees the objects, not at chance ...
    assert oric["base"] <= pope["base"] - GAP_MIN, (oric, pope)  # ... and its prior fails on ORIC's questions


def test_grpo_reduces_the_hallucination_and_keeps_pope(demo: dict[str, object]) -> None:
    oric = _row(demo, "oric_bench", "macro/f1")
    yes = _row(demo, "oric_bench", "yes_proportion")
    pope = _row(demo, "pope", "accuracy")
    assert oric["difference"] >= GAIN_MIN and oric["low"] > 0.0, oric  # up, the 95% interval above zero
    assert abs(yes["trained"] - 50.0) < abs(yes["base"] - 50.0), yes  # toward 50
    assert pope["difference"] >= -POPE_DROP_MAX, pope


def test_dpo_on_a_base_that_sees_cures_the_fine_levels_and_keeps_the_rest(demo: dict[str, object]) -> None:
    paired = _row(demo, "finer_yn", "paired_accuracy_l3_l7", "finer-seeing")
    positives = _row(demo, "finer_yn", "pos_accuracy", "finer-seeing")
    negatives = _row(demo, "finer_yn", "neg_accuracy_l3_l7", "finer-seeing")
    pope = _row(demo, "pope", "accuracy", "finer-seeing")
    assert paired["difference"] >= PAIRED_GAIN_MIN and paired["low"] > 0.0, paired
    assert positives["difference"] >= -POSITIVES_DROP_MAX, positives  # no trade of "yes" for "no"
    assert negatives["difference"] > 0.0, negatives  # the gain is in the fine negatives
    assert abs(pope["difference"]) <= FINER_POPE_CHANGE_MAX, pope  # the objects kept


def test_demo_prints_both_halves_table_and_says_where_each_row_comes_from(demo: dict[str, object]) -> None:
    stdout = str(demo["stdout"])
    assert set(demo["results"]["stages"].values()) == {"run"}  # type: ignore[index]  # from nothing cached
    (stages,) = [line for line in stdout.splitlines() if line.startswith("stages:")]
    assert "run now: " in stages and "reused" not in stages and "shared cache" not in stages, stages
    assert "ORIC half, rows oric_bench and pope" in stdout and "FINER half, rows marked (finer-seeing)" in stdout
    labels = [
        "oric_bench macro/f1",
        "oric_bench yes_proportion",
        "pope accuracy",
        "finer_yn paired_accuracy_l3_l7 (finer-seeing)",
        "finer_yn pos_accuracy (finer-seeing)",
        "finer_yn neg_accuracy_l3_l7 (finer-seeing)",
        "pope accuracy (finer-seeing)",
    ]
    table = stdout[stdout.index("metric ") :].splitlines()[1 : 1 + len(labels)]
    assert [line.split("  ")[0] for line in table] == labels
    for row in demo["results"]["rows"]:  # type: ignore[index]
        assert row["low"] <= row["difference"] <= row["high"], row
    assert "finer_yn: the probe's levels here are" in stdout
    # both runs' HTML reports, written beside the table (the ORIC half's while the FINER half trains)
    out = demo["out"]
    reports = [out / "grpo" / "report.html", out / "finer-seeing" / "dpo" / "report.html"]  # type: ignore[operator]
    assert all(report.is_file() for report in reports), reports
    assert f"reports:           {reports[0]}, {reports[1]} " in stdout
