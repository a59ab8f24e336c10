"""The embedded default's outcome, measured: `veritune demo` end to end on fixed seed 0, from nothing cached.

The miniature ORIC experiment (docs/LAB_NOTEBOOK.md, its sections from "TRL's LM head scores only the labelled
positions" on): the conventionally warm-started base model answers POPE-random-style questions far better
than ORIC-Bench's incongruous ones, and GRPO on ORIC's questions raises its ORIC-Bench macro-F1 (the paired
bootstrap interval above zero), moves its yes-proportion toward 50 and keeps its POPE accuracy. The bounds
sit inside the three seeds' spread (GAP_MIN, GAIN_MIN, POPE_DROP_MAX below; measured values in docs/LAB_NOTEBOOK.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, entry_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
GAP_MIN = 15.0  # the bound on POPE accuracy minus ORIC-Bench macro-F1, base model
# ORIC-Bench macro-F1 after GRPO minus before, with dynamic sampling (seeds 0, 1, 2: +14.7, +11.4, +7.6; without it
# +15.9, +7.3, +7.2 on the same machine, docs/LAB_NOTEBOOK.md, "Dynamic sampling on val")
GAIN_MIN = 6.0
# POPE accuracy points GRPO may cost (seeds 0, 1, 2: -2.3, +3.3, +1.0 with dynamic sampling; without it -3.6, +2.3, -0.1
# on another 2-core machine; the target is 2, unmet on seed 0).
# Float sums differ between CPU types and move a run's numbers: the same code gave seed 0 a POPE change of
# -3.3 on one machine and -1.6 on another (docs/LAB_NOTEBOOK.md), so the bound is seed 0's -3.6 less
# that shift, rounded out
POPE_DROP_MAX = 5.5


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("demo")
    command = [sys.executable, "-m", "veritune.cli", "demo", "--out", str(out / "run"), "--seed", "0"]
    # one thread (the demo's default too), as the runs in docs/RESULTS.md: seed 0 then reproduces its row exactly
    env = entry_env(VERITUNE_CACHE=str(out / "cache"), OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=2300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"stdout": result.stdout, "results": json.loads((out / "run" / "results.json").read_text())}


def _row(demo: dict[str, object], benchmark: str, metric: str) -> dict[str, float]:
    rows = demo["results"]["rows"]  # type: ignore[index]
    return next(row for row in rows if row["benchmark"] == benchmark and row["metric"] == metric)


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


def test_demo_prints_the_before_after_table(demo: dict[str, object]) -> None:
    stdout = str(demo["stdout"])
    assert set(demo["results"]["stages"].values()) == {"run"}  # type: ignore[index]  # from nothing cached
    assert "stages:            run now: world, tiny-qwen3vl" in stdout
    assert "metric" in stdout and "95% interval" in stdout
    for benchmark, metric in [("oric_bench", "macro/f1"), ("pope", "accuracy"), ("finer", "paired_accuracy")]:
        row = _row(demo, benchmark, metric)
        assert row["low"] <= row["high"], row
        assert f"{benchmark} {metric}" in stdout


def test_demo_reports_finers_yes_no_probe_before_and_after_dpo(demo: dict[str, object]) -> None:
    # FINER's yes/no probe (FINER paper, arXiv 2603.17662, Sec. 1, Fig. 1) from the DPO run's eval hook: the rows
    # are there and measured on the same pairs before and after. No gain is asserted: the miniature does not
    # reach the +10 points a FINER effect needs (its base does not see per-instance attributes; docs/LAB_NOTEBOOK.md,
    # "Which attributes the tiny base can learn to see, and how fast").
    stdout = str(demo["stdout"])
    for metric in ("neg_accuracy_l3_l7", "paired_accuracy", "pos_accuracy"):
        row = _row(demo, "finer_yn", metric)
        assert row["trained_by"] == "dpo" and row["low"] <= row["high"], row
        assert abs(row["trained"] - row["base"] - row["difference"]) < 1e-6, row
        assert f"finer_yn {metric}" in stdout
    assert "finer_yn: the probe's levels here are L1, L2, L3 " in stdout  # two attributes per object in this world
