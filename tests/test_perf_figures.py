"""``perf/figures.py``: the figures table a benchmark prints, read back from PERFORMANCE.md, and the comparison
``make bench`` prints beside each figure. Hand-made numbers only: no timing happens here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "perf"))

from figures import Figure, compare, figures_table, parse_figures  # noqa: E402

SECTION = """## oric_builder

ORIC builder (7.2). Command: `python perf/bench_oric_builder.py` (120 s, 2026-11-25)

| stage | official min (s) | veritune min (s) |
| --- | --- | --- |
| load + validate | 6.3 | 4.1 |

| figure | value | unit | better |
| --- | --- | --- | --- |
| model-free stages, veritune (median) | 10 | s | lower |
| model-free ratio veritune / official (median) | 0.28 | x | lower |
| CLIP image embedding | 240 | images/s | higher |
| not a number | n/a | s | lower |
| no direction | 3 | s | sideways |

peak RSS: 1.43 GiB
"""


def test_the_table_round_trips() -> None:
    rows = [("stage one (median)", 1.23456, "s", "lower"), ("throughput", 12345.6, "items/s", "higher")]
    assert "| throughput | 12346 | items/s | higher |" in figures_table(rows)
    assert parse_figures("text before\n" + figures_table(rows) + "\ntext after") == {
        "stage one (median)": Figure(1.235, "s", "lower"),
        "throughput": Figure(12346.0, "items/s", "higher"),
    }


def test_only_the_figures_table_of_a_section_is_read() -> None:
    assert parse_figures(SECTION) == {
        "model-free stages, veritune (median)": Figure(10.0, "s", "lower"),
        "model-free ratio veritune / official (median)": Figure(0.28, "x", "lower"),
        "CLIP image embedding": Figure(240.0, "images/s", "higher"),
    }
    assert parse_figures("| stage | seconds |\n| --- | --- |\n| load | 6.9 |") == {}


def test_a_figure_more_than_20_percent_worse_is_a_regression() -> None:
    recorded = parse_figures(SECTION)
    now = {
        "model-free stages, veritune (median)": Figure(12.1, "s", "lower"),  # 1.21x the time: worse by > 20%
        "model-free ratio veritune / official (median)": Figure(0.336, "x", "lower"),  # 1.2x: not more than 20%
        "CLIP image embedding": Figure(199.0, "images/s", "higher"),  # 240 / 199 = 1.206: slower by > 20%
        "new figure": Figure(1.0, "s", "lower"),
    }
    lines = compare(now, recorded)
    assert (
        lines[0]
        == "model-free stages, veritune (median): 12.1 s, recorded 10 s, ratio 1.21  REGRESSION (lower is better)"
    )
    assert lines[1] == "model-free ratio veritune / official (median): 0.336 x, recorded 0.28 x, ratio 1.20"
    assert lines[2].endswith("ratio 0.83  REGRESSION (higher is better)")
    assert lines[3] == "new figure: 1 s (nothing recorded)"


def test_faster_is_never_a_regression() -> None:
    recorded = {"time": Figure(10.0, "s", "lower"), "rate": Figure(100.0, "items/s", "higher")}
    now = {"time": Figure(2.0, "s", "lower"), "rate": Figure(500.0, "items/s", "higher")}
    assert not any("REGRESSION" in line for line in compare(now, recorded))


def test_bad_rows_are_refused_when_printed() -> None:
    with pytest.raises(ValueError):
        figures_table([("a | b", 1.0, "s", "lower")])
    with pytest.raises(ValueError):
        figures_table([("a", 1.0, "s", "faster")])


def test_a_machine_that_cannot_measure_keeps_the_recorded_section(tmp_path: Path, monkeypatch) -> None:
    """``make bench`` without a GPU leaves the GPU figures a lent machine recorded; a section it measures is
    rewritten."""
    import run_all

    skipped = tmp_path / "skipped.py"
    skipped.write_text(f"print({run_all.SKIPPED!r} + ': no CUDA device on this machine')\n")
    measured = tmp_path / "measured.py"
    measured.write_text("print('new figure 2')\n")
    monkeypatch.setattr(
        run_all, "BENCHMARKS", [("cpu", [str(measured)], "a CPU benchmark"), ("gpu", [str(skipped)], "a GPU one")]
    )
    record = tmp_path / "PERFORMANCE.md"
    gpu = "## gpu\n\nA GPU one. Command: `x` (382 s, 2026-11-26)\n\nstep time 8.64 s on an H100\n"
    record.write_text("# Performance\n\n## cpu\n\nold figure 1\n\n" + gpu)
    monkeypatch.setattr(sys, "argv", ["run_all.py", "--out", str(record)])
    run_all.main()
    text = record.read_text()
    assert "new figure 2" in text and "old figure 1" not in text
    assert gpu in text
