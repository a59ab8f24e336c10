"""The paired bootstrap interval of a metric difference, on cases whose answer is computed by hand."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from eval_hooks.base import EvalItem
from eval_hooks.bootstrap import (
    format_table,
    metric_difference_interval,
    metric_difference_intervals,
    paired_bootstrap,
    percentile,
    question_groups,
)


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([4, 1, 3, 2], 0.5) == 2.5  # halfway between the 2nd and 3rd order statistics
    assert percentile([1, 2, 3, 4, 5], 0.25) == 2.0
    assert percentile([7.0], 0.975) == 7.0


def test_two_units_give_the_hand_computed_interval() -> None:
    # Differences 0 and 1: the mean of two draws is 0 (p=1/4), 0.5 (p=1/2) or 1 (p=1/4), so the 2.5% and
    # 97.5% quantiles of the resampled means are 0 and 1.
    differences = [0.0, 1.0]
    low, high = paired_bootstrap(lambda idx: sum(differences[i] for i in idx) / len(idx), 2, resamples=4000, seed=1)
    assert (low, high) == (0.0, 1.0)
    # With a 40% interval the quantiles (0.3 and 0.7) both fall inside the p=1/2 mass at 0.5.
    low, high = paired_bootstrap(
        lambda idx: sum(differences[i] for i in idx) / len(idx), 2, resamples=4000, confidence=0.4
    )
    assert (low, high) == (0.5, 0.5)


def _pope_items(labels: list[str]) -> list[EvalItem]:
    return [
        EvalItem(
            id=f"random/{i}",
            prompt="Is there a cup in the image?",
            images=[Path("x.jpg")],
            meta={"label": label, "subset": "random"},
        )
        for i, label in enumerate(labels)
    ]


def test_a_uniform_gain_has_a_degenerate_interval() -> None:
    items = _pope_items(["yes", "no", "yes", "no"])
    truth = {item.id: item.meta["label"] for item in items}
    wrong = {key: "no" if value == "yes" else "yes" for key, value in truth.items()}
    row = metric_difference_interval("pope", items, wrong, truth, "accuracy", resamples=200)
    assert (row["base"], row["trained"], row["difference"]) == (0.0, 100.0, 100.0)  # percent
    assert (row["low"], row["high"]) == (100.0, 100.0)


def test_no_change_gives_zero_and_one_changed_answer_a_hand_computed_point() -> None:
    items = _pope_items(["yes", "no", "yes", "no"])
    base = {item.id: "yes" for item in items}
    trained = dict(base, **{"random/1": "no"})  # one more right answer out of four
    row = metric_difference_interval("pope", items, base, trained, "accuracy", resamples=500)
    assert row["difference"] == pytest.approx(25.0) and row["low"] >= 0.0 and row["high"] <= 100.0  # percent
    assert metric_difference_interval("pope", items, base, base, "accuracy", resamples=50)["high"] == 0.0


def test_paraphrases_are_resampled_together() -> None:
    items = [EvalItem(id=f"{q}/p{p}", prompt="", images=[], meta={}) for q in (1, 2) for p in range(4)]
    assert [[item.id for item in group] for group in question_groups(items)] == [
        ["1/p0", "1/p1", "1/p2", "1/p3"],
        ["2/p0", "2/p1", "2/p2", "2/p3"],
    ]


def test_table_lists_metric_base_trained_difference_interval() -> None:
    text = format_table(
        [
            {
                "benchmark": "oric_bench",
                "metric": "macro/f1",
                "base": 40.0,
                "trained": 55.25,
                "difference": 15.25,
                "low": 8.0,
                "high": 22.5,
            }
        ]
    )
    assert text.splitlines()[1].split() == ["oric_bench", "macro/f1", "40.0", "55.2", "+15.2", "[+8.0,", "+22.5]"]


def test_finer_pairs_are_resampled_together() -> None:
    items = [EvalItem(id=f"f/{i}", prompt="", images=[], meta={"pair": f"f/{i // 2}"}) for i in range(4)]
    assert [[item.id for item in group] for group in question_groups(items)] == [["f/0", "f/1"], ["f/2", "f/3"]]


def test_several_metrics_from_one_set_of_draws_equal_one_call_each() -> None:
    """The demo's table and the run report score each draw once for all of a benchmark's metrics; every row
    must be exactly what a call for that metric alone gives (same seed, same questions drawn)."""
    items = _pope_items(["yes", "no", "yes", "no", "yes", "yes", "no", "no"])
    base = {item.id: "yes" for item in items}
    trained = dict(base, **{"random/1": "no", "random/3": "no", "random/6": "no", "random/0": "no"})
    metrics = ["accuracy", "f1", "yes_ratio"]
    together = metric_difference_intervals("pope", items, base, trained, metrics, resamples=300, seed=4)
    alone = [metric_difference_interval("pope", items, base, trained, m, resamples=300, seed=4) for m in metrics]
    assert together == alone and len({row["low"] for row in together}) > 1


def _random_case(name: str, rng: random.Random) -> tuple[list[EvalItem], dict[str, str], dict[str, str]]:
    """Items of ``name`` in its release's shape, and two models' answers drawn at random (some unresolved,
    some missing, one image missing)."""
    items = []
    answers = ["Yes.", "No", "yes, there is", "I cannot tell", "no.", ""]
    if name == "pope":
        for i in range(60):
            meta = {"label": rng.choice(["yes", "no"]), "subset": ["random", "popular", "adversarial"][i % 3]}
            items.append(EvalItem(f"{meta['subset']}/{i}", "Is there a cup?", [Path("x.jpg")], 16, meta))
    elif name == "oric_bench":
        for i in range(30):
            label, size = rng.choice(["yes", "no"]), rng.choice(["small", "medium", "large", None])
            for p in range(4):
                meta = {"label": label, "paraphrase": p, "object_size": size, "target_object": "cup"}
                items.append(EvalItem(f"{i}/p{p}", "Question: ...", [Path("x.jpg")], 8, meta))
    else:
        for i in range(40):
            level, kind = rng.randint(1, 7), rng.choice(["obj", "attr", "rel", ""])
            for polarity in ("pos", "neg"):
                meta = {
                    "label": "yes" if polarity == "pos" else "no",
                    "level": level,
                    "polarity": polarity,
                    "pair": f"f/{i}/L{level}",
                    "sample": f"f/{i}",
                    "negated": kind,
                }
                items.append(EvalItem(f"f/{i}/L{level}/{polarity}", "Is ...?", [Path("x.jpg")], 3, meta))
    items[5].missing_images = [Path("gone.jpg")]
    base = {item.id: rng.choice(answers) for item in items if rng.random() < 0.95}
    trained = {item.id: rng.choice(answers) for item in items if rng.random() < 0.95}
    return items, base, trained


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        ("pope", ["accuracy", "f1", "adversarial/yes_ratio"]),
        ("oric_bench", ["macro/f1", "yes_proportion", "p2/macro/recall", "no/recall"]),
        ("finer_yn", ["paired_accuracy_l3_l7", "pos_accuracy", "neg_accuracy_l3_l7", "yes_proportion"]),
    ],
)
def test_summed_tallies_give_the_scored_draws_floats(name: str, metrics: list[str], monkeypatch) -> None:
    """A benchmark with additive counts: each unit's tallies, summed per draw, give every metric's score and
    every interval bound to the last bit of scoring each drawn copy (the path of a benchmark without them)."""
    from eval_hooks import bootstrap
    from eval_hooks.registry import get_benchmark

    benchmark = get_benchmark(name)
    for seed in range(3):
        items, base, trained = _random_case(name, random.Random(seed))
        tallies = benchmark.counts(items, trained)
        assert benchmark.metrics_from_counts(tallies) == benchmark.score(items, trained)["metrics"]
        halves = [benchmark.counts(group, trained) for group in question_groups(items)]
        summed: dict = {}
        for half in halves:
            for key, count in half.items():
                summed[key] = summed.get(key, 0) + count
        assert summed == tallies  # additive over the bootstrap's units
        fast = metric_difference_intervals(name, items, base, trained, metrics, resamples=300, seed=seed)
        with monkeypatch.context() as patch:
            patch.setattr(bootstrap, "_summed_statistic", lambda *args: None)
            slow = metric_difference_intervals(name, items, base, trained, metrics, resamples=300, seed=seed)
        assert fast == slow


def test_a_subclass_that_scores_its_own_way_is_scored_per_draw() -> None:
    """Tallies inherited from a parent whose ``score`` the subclass replaces are not that subclass's metrics: its
    draws are scored one by one."""
    from eval_hooks import bootstrap
    from eval_hooks.benchmarks.pope import Pope

    class Halved(Pope):
        def score(self, items, predictions):  # noqa: ANN001, ANN201
            result = super().score(items, predictions)
            return {**result, "metrics": {k: v / 2 for k, v in result["metrics"].items()}}

    items, base, trained = _random_case("pope", random.Random(0))
    assert bootstrap._summed_statistic(Halved(), question_groups(items), base, trained, tuple) is None
    assert bootstrap._summed_statistic(Pope(), question_groups(items), base, trained, tuple) is not None


def test_oric_bench_scores_paraphrases_that_cover_different_questions() -> None:
    """A partial evaluation may leave a paraphrase without a small "yes" question: the size's recall averages over
    the paraphrases that have one (no KeyError), and the official metrics over all four."""
    from eval_hooks.registry import get_benchmark

    items, _, trained = _random_case("oric_bench", random.Random(1))
    small = [i for i in items if i.meta["label"] == "yes" and i.meta["object_size"] == "small"]
    assert small
    kept = [i for i in items if not (i in small and i.meta["paraphrase"] == 3)]
    metrics = get_benchmark("oric_bench").score(kept, trained)["metrics"]
    assert "p3/macro/f1" in metrics and "yes_recall_small" in metrics
