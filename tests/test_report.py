"""The static HTML report of a run: training curves, eval metrics per checkpoint, tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.errors import UserError
from veritune.cli import main
from veritune.report import (
    GRPO_ZERO_LOSS_NOTE,
    log_ticks,
    metric_groups,
    nice_ticks,
    svg_line_plot,
    tick_labels,
    wants_log_axis,
    write_report,
)


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
        "oric_bench: headline",
        "oric_bench: yes-proportion",
        "oric_bench: macro",
        "oric_bench: yes",
        "oric_bench: no",
        "confusion, step 1",
        "confusion, step 3",
    ]
    assert "macro/f1" in page and "Confusion matrices" in page
    assert "Loss ~0 by design" not in page  # a loss of 0.1 to 0.3 is no GRPO beta-0 loss
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


# ---- axes: ticks scaled to the data, distinct labels, log ticks for the learning rate


@pytest.mark.parametrize(
    ("low", "high"),
    [
        (0.0, 1.0),
        (1, 20),
        (100.0, 100.0),  # FINER's "resolved" share, 100 on every checkpoint
        (1e-4, 1e-4),  # a constant learning rate
        (-4e-8, 4e-8),  # GRPO's loss with beta 0
        (0.0, 0.0),
        (99.5, 100.25),
        (63.1, 90.0),
        (-3.0, 250000.0),
        (1.0000001, 1.0000004),
    ],
)
def test_ticks_cover_the_data_with_distinct_labels(low: float, high: float) -> None:
    ticks = nice_ticks(low, high)
    labels = tick_labels(ticks)
    assert ticks == sorted(ticks) and 3 <= len(ticks) <= 8
    assert ticks[0] <= low and ticks[-1] >= high
    assert len(set(labels)) == len(labels), labels
    span = ticks[-1] - ticks[0]
    if high > low:  # the axis is scaled to the data: the data fill more than a third of it
        assert (high - low) / span > 1 / 3
    else:  # a constant sits mid-axis, not on an edge of a 0-to-1 axis
        assert ticks[0] < low < ticks[-1] and span <= 2 * (abs(low) * 0.1 or 1.0) * 1.5


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [(1, 3, [1, 2, 3]), (0, 10, [0, 2, 4, 6, 8, 10]), (1, 20, [0, 5, 10, 15, 20]), (0, 1000, [0, 250, 500, 750, 1000])],
)
def test_training_steps_get_whole_ticks(low: int, high: int, ticks: list[int]) -> None:
    assert nice_ticks(low, high, integer=True) == ticks


def test_a_constant_learning_rate_gets_scientific_ticks_around_it() -> None:
    assert tick_labels(nice_ticks(1e-4, 1e-4)) == ["9e-5", "9.5e-5", "1e-4", "1.05e-4", "1.1e-4"]
    assert tick_labels(nice_ticks(100.0, 100.0)) == ["90", "95", "100", "105", "110"]


def test_a_decaying_learning_rate_gets_log_ticks() -> None:
    rates = [1e-4 * 0.7**step for step in range(12)]  # 1e-4 down to 2e-6
    assert wants_log_axis(rates) and not wants_log_axis([1e-4] * 5) and not wants_log_axis([0.0, 1e-4])
    ticks = log_ticks(min(rates), max(rates))
    assert tick_labels(ticks, log=True) == ["1e-6", "2e-6", "5e-6", "1e-5", "2e-5", "5e-5", "1e-4"]
    assert tick_labels(log_ticks(1e-7, 1e-2), log=True) == ["1e-7", "1e-6", "1e-5", "1e-4", "0.001", "0.01"]
    plot = svg_line_plot("learning rate", {"learning_rate": list(enumerate(rates))}, log_y=True)
    assert "(log scale)" in plot and ">1e-6</text>" in plot and ">1e-4</text>" in plot


def test_long_legend_names_are_shortened_with_the_full_name_on_hover() -> None:
    name = "rewards/plain_accuracy_reward/mean_of_a_very_long_reward_function_name_that_goes_on_and_on_and_on"
    plot = svg_line_plot("rewards", {name: [(1, 0.5), (2, 0.7)], "reward": [(1, 1.0), (2, 1.2)]})
    assert f"<title>{name}</title>" in plot
    shown = re.findall(r'font-size="11">([^<]*\u2026[^<]*)</text>', plot)
    assert len(shown) == 1 and shown[0].startswith("rewards/") and shown[0].endswith("and_on")


def test_oric_headline_is_macro_f1_and_recall_by_size_is_its_own_chart() -> None:
    names = ["yes/f1", "no/f1", "macro/precision", "macro/recall", "macro/f1", "yes_proportion"]
    names += ["yes_recall_small", "yes_recall_medium", "yes_recall_large", "p0/macro/f1", "p0/yes_proportion"]
    groups = metric_groups(names)
    assert groups["headline"] == ["macro/f1"]
    assert groups["yes_recall"] == ["yes_recall_small", "yes_recall_medium", "yes_recall_large"]
    assert groups["yes-proportion"] == ["yes_proportion", "p0/yes_proportion"]
    assert metric_groups(["accuracy", "f1", "yes_ratio", "random/f1"])["headline"] == ["accuracy", "f1"]  # POPE


# ---- a run as training and the eval hook leave it: notes, thumbnails, the `correct` column


def test_report_of_a_grpo_run_with_eval(tmp_path: Path) -> None:
    from helpers import write_report_run

    run = write_report_run(tmp_path / "run")
    page = write_report(run).read_text()
    assert GRPO_ZERO_LOSS_NOTE.replace("'", "&#x27;") in page  # the loss is ~1e-9 (beta 0)
    learning_rate = re.search(r'aria-label="learning rate".*?</svg>', page).group(0)
    assert ">1e-4</text>" in learning_rate and ">1.25</text>" not in learning_rate
    samples = page.split("<h3>Sample predictions at step 20</h3>")[1:]
    assert len(samples) == 2  # oric_bench and pope
    for table in samples:
        table = table.split("</table>")[0]
        assert "data:image/png;base64," in table
        assert not re.search(">[^<]*" + re.escape(str(run.parent)), table)  # paths only on hover, never as text
        assert "COCO_val2014_000000000005.jpg (missing)" in table  # the deleted image: its name, not a path
        assert ">True</td>" in table and ">None<" not in table
    # POPE's samples are graded by POPE's own rule: the step-0 answers include wrong ones
    first = json.loads((run / "eval" / "checkpoint-0" / "pope" / "metrics.json").read_text())
    assert {row["correct"] for row in first["samples"]} == {True, False}
    assert tick_free_of_duplicates(page)


def tick_free_of_duplicates(page: str) -> bool:
    """Every plot's y-axis tick labels (text-anchor end, left of the plot) are distinct."""
    for plot in re.findall(r"<svg.*?</svg>", page):
        labels = re.findall(r'text-anchor="end" fill="#555">([^<]*)</text>', plot)
        if len(labels) != len(set(labels)):
            return False
    return True


def test_pope_samples_are_graded_by_popes_rule() -> None:
    from eval_hooks.base import EvalItem
    from eval_hooks.evaluate import sample_rows
    from eval_hooks.registry import get_benchmark

    items = [EvalItem(id=f"random/{i}", prompt="Is there a dog?", meta={"label": "yes"}) for i in range(3)]
    predictions = {"random/0": "Yes, there is.", "random/1": "There is not a dog.", "random/2": "A dog."}
    rows = sample_rows(items, predictions, benchmark=get_benchmark("pope"))
    # POPE reads "A dog." as yes (no "no"/"not" word): the official rule never abstains
    assert [row["correct"] for row in rows] == [True, False, True]


def write_hook_results(
    run: Path, items: list, answers: dict, data: Path, images: Path, written_in: bool = False
) -> None:
    """ORIC-Bench eval records of a training run's hook, one per step: predictions and scored metrics.json (with
    ``written_in``, the folder each was written in, as the hook records it)."""
    from eval_hooks.evaluate import score_benchmark

    for step, predictions in answers.items():
        folder = run / "eval" / f"checkpoint-{step}" / "oric_bench"
        folder.mkdir(parents=True)
        (folder / "predictions.jsonl").write_text(
            "".join(json.dumps({"id": k, "prediction": v}) + "\n" for k, v in predictions.items())
        )
        result = score_benchmark("oric_bench", items, predictions)
        result["data"] = {"path": str(data), "image_root": str(images), "limit": None}
        if written_in:
            result["data"]["written_in"] = str(folder)
        (folder / "metrics.json").write_text(json.dumps(result))


def test_report_and_demo_results_share_one_bootstrap(tmp_path: Path) -> None:
    """The report's before/after interval is the demo's results.json interval for the same run: one computation
    (eval_hooks.bootstrap.hook_difference_intervals), the same resamples and seed, and the report says how many."""
    from eval_fixtures import write_oric_bench

    from eval_hooks.bootstrap import DEFAULT_RESAMPLES
    from eval_hooks.registry import get_benchmark
    from miniature.stages import results_table

    data, images = write_oric_bench(tmp_path / "data", questions=6)
    items = get_benchmark("oric_bench").load(data, images)
    answers = {
        0: {i.id: "yes" for i in items},
        2: {i.id: i.meta["label"] for i in items[:-4]} | {i.id: "no" for i in items[-4:]},
    }
    run = tmp_path / "run"
    write_hook_results(run, items, answers, data, images)
    page = write_report(run).read_text()
    assert f"{DEFAULT_RESAMPLES} resamples of the questions (seed 0)" in page and DEFAULT_RESAMPLES == 1000
    (row,) = results_table({"grpo": run}, [("oric_bench", "macro/f1")])
    assert row["resamples"] == DEFAULT_RESAMPLES and row["low"] < row["difference"] < row["high"]
    assert f"<td>[{row['low']:.4g}, {row['high']:.4g}]</td>" in page


def test_a_run_moved_with_its_data_still_gives_its_table_and_report(tmp_path: Path) -> None:
    """A demo folder copied or moved elsewhere: the eval hook's records name the old paths of the benchmark's files,
    which are found again at the same place relative to the run (eval_hooks.results.relocated)."""
    import shutil

    from eval_fixtures import write_oric_bench

    from eval_hooks.registry import get_benchmark
    from miniature.stages import results_table

    demo = tmp_path / "demo"
    data, images = write_oric_bench(demo / "data", questions=6)
    items = get_benchmark("oric_bench").load(data, images)
    answers = {0: {i.id: "yes" for i in items}, 2: {i.id: i.meta["label"] for i in items}}
    run = demo / "run"
    write_hook_results(run, items, answers, data, images, written_in=True)
    (before,) = results_table({"grpo": run}, [("oric_bench", "macro/f1")])
    moved = tmp_path / "elsewhere" / "demo-copy"
    shutil.move(demo, moved)
    (after,) = results_table({"grpo": moved / "run"}, [("oric_bench", "macro/f1")])
    assert after == before
    assert "<img" in write_report(moved / "run").read_text()  # the thumbnails from the moved images


def test_eval_only_report_shows_thumbnails_like_a_training_report(tmp_path: Path) -> None:
    """An ``eval run --out`` folder's report shows each sample's image as a thumbnail (its path on hover only),
    as a training run's report does, not the image's path as text."""
    import shutil

    from helpers import write_report_run

    from eval_hooks.results import results_record

    run = write_report_run(tmp_path / "run", steps=(0, 1))
    out = tmp_path / "out"
    results = {}
    for name in ("oric_bench", "pope"):
        shutil.copytree(run / "eval" / "checkpoint-1" / name, out / name)
        results[name] = json.loads((out / name / "metrics.json").read_text())
    (out / "results.json").write_text(json.dumps(results_record(results, {"model": "fixed-answers"})))
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "veritune eval report" in page
    samples = page.split("<h3>Sample predictions</h3>")[1:]
    assert len(samples) == 2  # oric_bench and pope
    for table in samples:
        table = table.split("</table>")[0]
        assert "data:image/png;base64," in table
        assert not re.search(">[^<]*" + re.escape(str(run.parent)), table)  # paths only on hover, never as text
        assert "COCO_val2014_000000000005.jpg (missing)" in table  # the deleted image: its name, not a path


def test_the_total_reward_of_one_reward_function_stays_visible_over_it(tmp_path: Path) -> None:
    """With one reward function GRPO's total ``reward`` equals its mean at every step: the total is drawn dashed
    over it (both lines show), with a note saying why they coincide; two functions get no note, no dash."""
    one = [{"step": s, "reward": 0.1 * s, "rewards/accuracy_reward/mean": 0.1 * s} for s in (1, 2, 3)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": one}))
    page = write_report(tmp_path).read_text()
    plot = re.search(r'<svg[^>]*aria-label="rewards".*?</svg>', page).group(0)
    lines = re.findall(r'<polyline fill="none" stroke="([^"]+)" stroke-width="2"( stroke-dasharray="6 4")?', plot)
    assert len(lines) == 2 and lines[0][1] == "" and lines[1][1]  # the function solid, the total dashed on top
    assert lines[0][0] != lines[1][0]
    legend = re.findall(r"<g><title>([^<]*)</title><line[^>]*?( stroke-dasharray=\"6 4\")?/>", plot)
    assert legend == [("rewards/accuracy_reward/mean", ""), ("reward", ' stroke-dasharray="6 4"')]
    assert "reward (the total, dashed) equals rewards/accuracy_reward/mean: the run has one reward function" in page

    two = [{**row, "rewards/format_reward/mean": 0.5, "reward": row["reward"] + 0.5} for row in one]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": two}))
    page = write_report(tmp_path).read_text()
    assert "stroke-dasharray" not in page and "one reward function" not in page
