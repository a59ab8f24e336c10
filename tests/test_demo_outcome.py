"""The embedded default's outcome, measured: `veritune demo` end to end on fixed seed 0, from nothing cached.

What it asserts is the part of the miniature ORIC experiment that holds today (docs/RESULTS.md): the
conventionally warm-started base model shows the paper's phenomenon, answering POPE-random-style questions
far better than ORIC-Bench's incongruous ones. Measured on seeds 0, 1, 2: gaps of 50.3, 32.6 and 31.7 points
between POPE accuracy and ORIC-Bench macro-F1, so the 15-point bound of the issue sits well inside the
spread. That GRPO closes the gap is NOT asserted: it does not yet (RESULTS.md, "Third pass").
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, entry_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("demo")
    command = [sys.executable, "-m", "veritune.cli", "demo", "--out", str(out / "run"), "--seed", "0", "--steps", "2"]
    env = entry_env(VERITUNE_CACHE=str(out / "cache"), OMP_NUM_THREADS="2")
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=2300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"stdout": result.stdout, "results": json.loads((out / "run" / "results.json").read_text())}


def _row(demo: dict[str, object], benchmark: str, metric: str) -> dict[str, float]:
    rows = demo["results"]["rows"]  # type: ignore[index]
    return next(row for row in rows if row["benchmark"] == benchmark and row["metric"] == metric)


def test_base_model_hallucinates_under_contextual_incongruity(demo: dict[str, object]) -> None:
    oric = _row(demo, "oric_bench_r1", "macro/f1")
    pope = _row(demo, "pope", "accuracy")
    assert pope["base"] >= 60.0, pope  # the base model answers from the image's scene, not at chance
    assert oric["base"] <= pope["base"] - 15.0, (oric, pope)  # ... and that prior fails on ORIC's questions


def test_demo_prints_the_before_after_table(demo: dict[str, object]) -> None:
    stdout = str(demo["stdout"])
    assert "metric" in stdout and "95% interval" in stdout
    for benchmark, metric in [("oric_bench_r1", "macro/f1"), ("pope", "accuracy"), ("finer", "paired_accuracy")]:
        row = _row(demo, benchmark, metric)
        assert row["low"] <= row["high"], row
        assert f"{benchmark} {metric}" in stdout
