"""The static HTML report of a run: training curves, eval metrics per checkpoint, tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veritune.cli import main
from veritune.core.errors import UserError
from veritune.report import write_report


def test_report_plots_training_and_eval(tmp_path: Path) -> None:
    history = [
        {"step": s, "loss": 0.1 * s, "reward": 0.5 + 0.1 * s, "rewards/accuracy_reward/mean": 0.2 * s}
        for s in (1, 2, 3)
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    for step, f1 in ((1, 40.0), (3, 60.0)):
        folder = tmp_path / "eval" / f"checkpoint-{step}" / "oric_bench"
        folder.mkdir(parents=True)
        metrics = {
            "macro/f1": f1,
            "yes/f1": f1,
            "no/f1": f1 - 5,
            "yes/precision": 50.0,
            "yes/recall": 70.0,
            "no/precision": 45.0,
            "no/recall": 30.0,
            "yes_proportion": 55.0,
        }
        (folder / "metrics.json").write_text(
            json.dumps({"metrics": metrics, "tables": {"confusion": [{"true": "yes", "pred_yes": 3}]}, "counts": {}})
        )
    assert main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    plots = re.findall(r'<svg[^>]*aria-label="([^"]*)"', page)
    assert plots == [
        "rewards",
        "loss",
        "oric_bench: yes-proportion",
        "oric_bench: macro",
        "oric_bench: yes",
        "oric_bench: no",
        "confusion, step 1",
        "confusion, step 3",
    ]
    assert "macro/f1" in page and "Confusion matrices" in page
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_report_of_an_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no trainer_state.json and no eval/checkpoint-N/<benchmark>/metrics.json"):
        write_report(tmp_path)


def test_report_command_is_wired_beside_the_report_not_in_the_eval_commands(tmp_path: Path) -> None:
    """``veritune report`` lives in the top layer with the report: running it imports no eval command."""
    import os
    import subprocess
    import sys

    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.5}]}))
    code = (
        "import sys; from veritune.cli import main\n"
        f"assert main(['report', {str(tmp_path)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('eval_hooks') or m in ('torch', 'transformers')))"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().splitlines()[-1] == "[]" and (tmp_path / "report.html").is_file()


def test_report_and_demo_results_share_one_bootstrap(tmp_path: Path) -> None:
    """The report's before/after interval is the demo's results.json interval for the same run: one computation
    (eval_hooks.bootstrap.hook_difference_intervals), the same resamples and seed, and the report says how many."""
    from eval_fixtures import write_oric_bench

    from eval_hooks.bootstrap import DEFAULT_RESAMPLES
    from eval_hooks.evaluate import score_benchmark
    from eval_hooks.registry import get_benchmark
    from veritune.demo import results_table

    data, images = write_oric_bench(tmp_path / "data", questions=6)
    items = get_benchmark("oric_bench").load(data, images)
    answers = {
        0: {i.id: "yes" for i in items},
        2: {i.id: i.meta["label"] for i in items[:-4]} | {i.id: "no" for i in items[-4:]},
    }
    run = tmp_path / "run"
    for step, predictions in answers.items():
        folder = run / "eval" / f"checkpoint-{step}" / "oric_bench"
        folder.mkdir(parents=True)
        (folder / "predictions.jsonl").write_text(
            "".join(json.dumps({"id": k, "prediction": v}) + "\n" for k, v in predictions.items())
        )
        result = score_benchmark("oric_bench", items, predictions)
        result["data"] = {"path": str(data), "image_root": str(images), "limit": None}
        (folder / "metrics.json").write_text(json.dumps(result))
    page = write_report(run).read_text()
    assert f"{DEFAULT_RESAMPLES} resamples of the questions (seed 0)" in page and DEFAULT_RESAMPLES == 1000
    (row,) = results_table({"grpo": run}, [("oric_bench", "macro/f1")])
    assert row["resamples"] == DEFAULT_RESAMPLES and row["low"] < row["difference"] < row["high"]
    assert f"<td>[{row['low']:.4g}, {row['high']:.4g}]</td>" in page
