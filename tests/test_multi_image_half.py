"""The multi-image half's rule and command line (miniature/multi_image_half.py): the verdict the rule written before
any run gives on dev rows (docs/LAB_NOTEBOOK.md#multi-image-rule), and the flags of ``veritune demo``. The half's
stages run through the public commands in its dev runs; their numbers are in the notebook."""

from __future__ import annotations

from pathlib import Path

import pytest

from miniature.multi_image_half import CLAIM_ROW, TABLE, dev_rule, format_dev_rule
from veritune.cli import main


def rows(hard_negative: float, low: float, oric: float = 0.0, pope: float = 0.0) -> dict:
    values = {
        CLAIM_ROW: (hard_negative, low),
        ("oric_bench", "macro/f1"): (oric, oric - 3),
        ("pope", "accuracy"): (pope, pope - 2),
    }
    return {key: {"difference": d, "low": lo, "high": d + 5} for key, (d, lo) in values.items()}


def test_the_bound_is_half_the_smallest_rise_rounded_down_when_every_seed_holds() -> None:
    verdict = dev_rule({"0": rows(9.4, 2.0), "1": rows(7.9, 0.5, oric=-2.9), "2": rows(12.0, 4.0, pope=-1.0)})
    assert verdict["claim_holds"] and verdict["hard_negative_gain_min"] == 3.0 and verdict["failures"] == []
    assert "bound 3 points" in format_dev_rule(verdict)


@pytest.mark.parametrize(
    ("seed_rows", "failure"),
    [
        (rows(4.8, -3.0), "seed 1: mioh existence/hard_negative +4.8"),  # the interval reaches below zero
        (rows(-1.0, -6.0), "seed 1: mioh existence/hard_negative -1.0"),
        (rows(8.0, 1.0, oric=-3.5), "seed 1: oric_bench macro/f1 -3.5"),  # a single-image benchmark lost
        (rows(8.0, 1.0, pope=-4.0), "seed 1: pope accuracy -4.0"),
    ],
)
def test_one_seed_that_misses_fails_the_claim_and_fixes_no_bound(seed_rows: dict, failure: str) -> None:
    verdict = dev_rule({"0": rows(9.0, 2.0), "1": seed_rows})
    assert not verdict["claim_holds"] and verdict["hard_negative_gain_min"] is None
    assert [f for f in verdict["failures"] if f.startswith(failure)], verdict["failures"]
    assert "does not hold on dev" in format_dev_rule(verdict)


def test_the_table_reads_every_row_from_the_multi_image_run() -> None:
    assert {entry[2] for entry in TABLE} == {"multi-image"} and TABLE[0][:2] == CLAIM_ROW


def test_multi_image_only_refuses_the_other_halves_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--multi-image-only", "--steps", "3", "--out", str(tmp_path / "demo")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: --multi-image-only: --steps and --finer belong")
    assert err.count("\n") == 1 and not (tmp_path / "demo" / "stages").exists()
