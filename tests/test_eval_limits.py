"""Which items a limit keeps (``--limit N``, ``NAME:N``, ``eval_limit``): a seeded sample stratified over each
benchmark's subsets with its groups whole, the old first-N as an explicit choice; ``NAME:N`` in ``eval run``,
``eval score`` and recipes; and the README's data flow (build the benchmarks, then ``eval run --data-root``)."""

from __future__ import annotations

import csv
import json
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT
from PIL import Image

from core.errors import UserError
from eval_hooks.paths import parse_benchmark_limits, parse_benchmark_names
from eval_hooks.prepare import prepare_benchmark
from eval_hooks.registry import get_benchmark
from eval_hooks.selection import largest_remainder, select_items
from veritune.cli import main

# ----------------------------------------------------------------------------- benchmark files, official formats


def write_pope(root: Path, sizes: dict[str, int], images: bool = False) -> Path:
    """POPE's three subset files (JSON lines) with ``sizes[subset]`` questions each."""
    root.mkdir(parents=True, exist_ok=True)
    for subset, size in sizes.items():
        rows = [
            {
                "question_id": i,
                "image": f"{subset}{i % 3}.jpg",
                "text": f"Is there a cat {i}?",
                "label": "yes no".split()[i % 2],
            }
            for i in range(size)
        ]
        (root / f"coco_pope_{subset}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
        if images:
            for i in range(3):
                Image.new("RGB", (32, 32), (40 * i, 90, 90)).save(root / f"{subset}{i}.jpg")
    return root


def write_finer(root: Path, pairs: dict[str, int]) -> Path:
    """A FINER MCQ CSV: ``pairs[setting]`` q+/q- pairs per setting, settings interleaved as in a build."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    order = [setting for index in range(max(pairs.values())) for setting, n in pairs.items() if index < n]
    for number, setting in enumerate(order):
        for polarity in ("pos", "neg"):
            rows.append(
                {
                    "image": f"{number}.jpg",
                    "qtype": f"{setting}_{polarity}",
                    "question": f"What is in the image {number}?",
                    **{f"choice{i}": f"option {i}" for i in range(1, 6)},
                    "gt_index": 1,
                    "k": 1,
                }
            )
    path = root / "finer.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


AMBER_TYPES = {
    "discriminative-hallucination": "existence",
    "discriminative-attribute-state": "attribute_state",
    "discriminative-attribute-number": "attribute_number",
    "discriminative-attribute-action": "attribute_action",
    "discriminative-relation": "relation",
}


def write_amber(root: Path, sizes: dict[str, int]) -> Path:
    """AMBER's discriminative query file and its annotations, attribute questions first (as the release)."""
    (root / "query").mkdir(parents=True, exist_ok=True)
    annotations, queries = [], []
    for kind, size in sizes.items():
        for _ in range(size):
            annotations.append({"id": len(annotations) + 1, "type": kind, "truth": "yes"})
            queries.append({"id": len(annotations), "image": f"AMBER_{len(annotations)}.jpg", "query": "Is it?"})
    (root / "annotations.json").write_text(json.dumps(annotations))
    path = root / "query" / "query_discriminative.json"
    path.write_text(json.dumps(queries))
    return path


def write_hallusionbench(root: Path, sets: dict[tuple[str, str], tuple[int, int, int]]) -> Path:
    """HallusionBench records: ``sets[(category, subcategory)] = (sets, figures, questions)``, each question
    asked about each figure of its set (so question pairs and figure groups span the whole set)."""
    root.mkdir(parents=True, exist_ok=True)
    records = []
    for (category, subcategory), (count, figures, questions) in sets.items():
        for set_id in range(count):
            for figure in range(figures):
                for question in range(questions):
                    records.append(
                        {
                            "category": category,
                            "subcategory": subcategory,
                            "visual_input": "1",
                            "set_id": str(set_id),
                            "figure_id": str(figure),
                            "question_id": str(question),
                            "question": "Is it so?",
                            "gt_answer": "1",
                        }
                    )
    path = root / "HallusionBench.json"
    path.write_text(json.dumps(records))
    return path


def write_finer_yn(root: Path, pairs: dict[int, int]) -> Path:
    """FINER's yes/no probe: ``pairs[level]`` pos/neg twins per level."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for level, count in pairs.items():
        for sample in range(count):
            for polarity in ("pos", "neg"):
                rows.append(
                    {
                        "image": f"{sample}.jpg",
                        "sample": f"s{sample}",
                        "level": level,
                        "pattern": "p",
                        "polarity": polarity,
                        "negated": "object" if polarity == "neg" else "",
                        "question": "Is there a cup?",
                        "answer": "yes" if polarity == "pos" else "no",
                    }
                )
    path = root / "finer_yn.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def group_of(name: str, item: Any) -> str:
    return get_benchmark(name).limit_group(item)


# (benchmark, writer, limit, expected units per stratum, expected items)
CASES = [
    # POPE 30/20/10 questions, 12 kept: 6/4/2, where first-N keeps 12 random ones
    ("pope", lambda d: write_pope(d, {"random": 30, "popular": 20, "adversarial": 10}), 12,
     {"random": 6, "popular": 4, "adversarial": 2}, 12),
    # FINER 20/10/10 pairs (40/20/20 questions), 24 questions: 12/6/6, each pair whole
    ("finer", lambda d: write_finer(d, {"multi_obj": 20, "multi_attr": 10, "multi_rel": 10}), 24,
     {"multi_obj": 12, "multi_attr": 6, "multi_rel": 6}, 24),
    # shares of 5 questions in pairs of two: never a half pair; the two questions left go to one more pair of
    # a stratum short of its share (multi_attr or multi_rel, drawn with the seed)
    ("finer", lambda d: write_finer(d, {"multi_obj": 20, "multi_attr": 10, "multi_rel": 10}), 20,
     {"multi_obj": 10, "multi_attr": 4, "multi_rel": 6}, 20),
    # shares of 2/1/1 questions: still whole pairs, still 4 questions
    ("finer", lambda d: write_finer(d, {"multi_obj": 20, "multi_attr": 10, "multi_rel": 10}), 4,
     {"multi_obj": 2, "multi_attr": 0, "multi_rel": 2}, 4),
    # AMBER 40 existence, 10 of each attribute type, 20 relation: 9 kept, 4/1/1/1/2
    ("amber_discriminative",
     lambda d: write_amber(d, {"discriminative-attribute-state": 10, "discriminative-attribute-number": 10,
                               "discriminative-attribute-action": 10, "discriminative-hallucination": 40,
                               "discriminative-relation": 20}), 9,
     {"attribute_state": 1, "attribute_number": 1, "attribute_action": 1, "existence": 4, "relation": 2}, 9),
    # HallusionBench: VS chart sets of 2x1 first, VD illusion sets of 2 figures x 2 questions, VS table 1x2
    ("hallusionbench",
     lambda d: write_hallusionbench(d, {("VS", "chart"): (10, 2, 1), ("VD", "illusion"): (5, 2, 2),
                                        ("VS", "table"): (5, 1, 2)}), 10,
     {"VS/chart": 4, "VD/illusion": 4, "VS/table": 2}, 10),
    # FINER's yes/no probe counts pairs: 10 of 20/10/10 pairs at levels 1/3/5
    ("finer_yn", lambda d: write_finer_yn(d, {1: 20, 3: 10, 5: 10}), 10, {"1": 5, "3": 3, "5": 2}, 20),
]  # fmt: skip


@pytest.mark.parametrize(("name", "write", "limit", "per_stratum", "items"), CASES, ids=[c[0] for c in CASES])
def test_stratified_limit(
    name: str, write: Any, limit: int, per_stratum: dict[str, int], items: int, tmp_path: Path
) -> None:
    data = write(tmp_path / name)
    prepared = prepare_benchmark(name, data={name: data}, limit=limit)
    selection = prepared.selection
    assert {s: v["units"] for s, v in selection["strata"].items()} == per_stratum
    assert (selection["limit"], selection["seed"], selection["mode"], selection["items"]) == (
        limit,
        0,
        "stratified",
        items,
    )
    assert len(prepared.items) == items
    everything = prepare_benchmark(name, data={name: data}).items
    chosen = {item.id for item in prepared.items}
    groups = Counter(group_of(name, item) for item in everything)
    kept = Counter(group_of(name, item) for item in prepared.items)
    assert all(kept[group] == groups[group] for group in kept), "a group was cut"
    # the same seed: the same items (every checkpoint, every run); another seed: others
    assert [i.id for i in prepare_benchmark(name, data={name: data}, limit=limit).items] == [
        i.id for i in prepared.items
    ]
    other = prepare_benchmark(name, data={name: data}, limit=limit, limit_seed=1)
    assert {i.id for i in other.items} != chosen and other.selection["seed"] == 1
    assert other.selection["units"] == selection["units"] == sum(per_stratum.values())
    # first-N stays available: the items of the first `limit` units in file order
    first = prepare_benchmark(name, data={name: data}, limit=limit, limit_mode="first")
    bench = get_benchmark(name)
    units = list(dict.fromkeys(bench.limit_unit(item) for item in everything))[:limit]
    assert [i.id for i in first.items] == [i.id for i in everything if bench.limit_unit(i) in units]
    assert first.selection["mode"] == "first" and first.selection["seed"] is None


def test_first_n_of_pope_is_one_subset_and_the_sample_is_not(tmp_path: Path) -> None:
    data = write_pope(tmp_path / "pope", {"random": 30, "popular": 30, "adversarial": 30})
    first = prepare_benchmark("pope", data={"pope": data}, limit=30, limit_mode="first")
    assert {i.meta["subset"] for i in first.items} == {"random"}
    sampled = prepare_benchmark("pope", data={"pope": data}, limit=30)
    assert Counter(i.meta["subset"] for i in sampled.items) == {"random": 10, "popular": 10, "adversarial": 10}


def test_oric_paraphrases_stay_together_and_the_labels_are_balanced(tmp_path: Path) -> None:
    from eval_fixtures import write_oric_bench

    bench, _ = write_oric_bench(tmp_path, questions=12)
    prepared = prepare_benchmark("oric_bench", data={"oric_bench": bench}, limit=4)
    questions = Counter(item.id.rpartition("/p")[0] for item in prepared.items)
    assert len(questions) == 4 and set(questions.values()) == {4}  # four paraphrases each
    assert Counter(item.meta["label"] for item in prepared.items if item.id.endswith("/p0")) == {"yes": 2, "no": 2}


@pytest.mark.parametrize(
    ("total", "sizes", "shares"),
    [
        (10, {"a": 5, "b": 3, "c": 2}, {"a": 5, "b": 3, "c": 2}),
        (4, {"a": 5, "b": 3, "c": 2}, {"a": 2, "b": 1, "c": 1}),  # 2.0, 1.2, 0.8: the largest remainder is c's
        (3, {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 1}),
        (2, {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 0}),  # ties: the first seen
    ],
)
def test_largest_remainder(total: int, sizes: dict[str, int], shares: dict[str, int]) -> None:
    assert largest_remainder(total, sizes) == shares


def test_a_limit_at_or_above_the_size_keeps_everything(tmp_path: Path) -> None:
    data = write_pope(tmp_path / "pope", {"random": 3, "popular": 2, "adversarial": 1})
    bench = get_benchmark("pope")
    items = prepare_benchmark("pope", data={"pope": data}).items
    kept, selection = select_items(bench, items, 6)
    assert kept == items and selection["mode"] == "all"
    with pytest.raises(UserError, match="--limit: must be at least 1, got 0"):
        select_items(bench, items, 0)


# ------------------------------------------------------------------------ NAME:N in eval run, eval score, recipes


@pytest.mark.parametrize(
    ("text", "names", "limits"),
    [
        ("pope:50", ["pope"], {"pope": 50}),
        ("pope:50,finer", ["pope", "finer"], {"pope": 50}),
        (["finer:500", "pope:300", "hallusionbench:300"], ["finer", "pope", "hallusionbench"],
         {"finer": 500, "pope": 300, "hallusionbench": 300}),
    ],
)  # fmt: skip
def test_name_n_is_parsed_by_the_one_parser(text: Any, names: list[str], limits: dict[str, int]) -> None:
    assert parse_benchmark_limits(parse_benchmark_names(text)) == (names, limits)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pope:0", r"'pope:0': expected NAME or NAME:N \(N a whole number, at least 1\)"),
        ("pope:x", r"'pope:x': expected NAME or NAME:N"),
        ("pope:5,pope:6", r"pope is given twice \(pope:5, pope:6\)"),
        ("pope,pope:6", r"pope is given twice"),
    ],
)
def test_bad_name_n_is_one_line(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_benchmark_names(text)


@pytest.fixture(scope="module")
def pope_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pope-limit")
    data = write_pope(root / "pope", {"random": 4, "popular": 4, "adversarial": 4}, images=True)
    out = root / "eval"
    common = ["--data", f"pope={data}", "--image-root", str(data), "--max-new-tokens", "2"]
    assert (
        main(["eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", "pope:6", *common, "--out", str(out)]) == 0
    )
    return data, out


# eval score on the predictions of `eval run --benchmarks pope:6`: (--benchmarks, further flags, exit code,
# whether the selection and metrics are eval run's, the error's start)
SCORE_CASES = [
    ("pope", [], 0, True, None),  # no flag: the selection is read from the run's metrics.json
    ("pope:6", [], 0, True, None),
    ("pope", ["--limit", "6"], 0, True, None),
    ("pope", ["--limit-seed", "0", "--limit-mode", "stratified"], 0, True, None),  # the run's, given again
    ("pope:6", ["--limit", "2"], 0, True, None),  # NAME:N wins over --limit
    # a flag that would draw other items than the run's: one line naming both values
    ("pope", ["--limit", "4"], 2, False, "error: pope: --limit 4 (the run's: 6) contradicts the selection recorded"),
    ("pope:6", ["--limit-seed", "1"], 2, False, "error: pope: --limit-seed 1 (the run's: 0) contradicts"),
    ("pope:6", ["--limit-mode", "first"], 2, False, "error: pope: --limit-mode first (the run's: stratified)"),
    ("pope:none", [], 2, False, "error: --benchmarks: 'pope:none': expected NAME or NAME:N"),
]


@pytest.mark.parametrize(("benchmarks", "extra", "code", "same", "error"), SCORE_CASES)
def test_eval_run_and_eval_score_take_name_n(
    pope_run: tuple[Path, Path],
    benchmarks: str,
    extra: list[str],
    code: int,
    same: bool,
    error: str | None,
    capsys: pytest.CaptureFixture,
) -> None:
    data, out = pope_run
    ran = json.loads((out / "pope" / "metrics.json").read_text())
    assert ran["selection"]["limit"] == 6 and ran["counts"]["predicted"] == 6
    assert {s: v["units"] for s, v in ran["selection"]["strata"].items()} == {
        "random": 2,
        "popular": 2,
        "adversarial": 2,
    }
    predictions = out / "pope" / "predictions.jsonl"
    scored_path = predictions.with_name("predictions.metrics.json")
    scored_path.unlink(missing_ok=True)
    capsys.readouterr()
    argv = ["eval", "score", "--benchmarks", benchmarks, "--data", f"pope={data}", "--predictions", str(predictions)]
    try:
        exit_code = main([*argv, *extra])
    except SystemExit as exit_info:
        exit_code = int(exit_info.code or 0)
    assert exit_code == code
    err = ""
    if error is not None:
        err = capsys.readouterr().err
        assert err.startswith(error) and err.count("\n") == 1, err
    if same:
        scored = json.loads(scored_path.read_text())
        assert scored["selection"] == ran["selection"] and scored["metrics"] == ran["metrics"]
        assert scored["selection_source"] == str(out / "pope" / "metrics.json")
        assert f"pope: the run's selection, read from {out / 'pope' / 'metrics.json'}" in capsys.readouterr().err
    if error is not None and "contradicts" in error:
        assert str(out / "pope" / "metrics.json") in err  # where the run's values come from


def test_eval_score_reads_the_selection_of_an_eval_run_folder_and_a_hook_checkpoint(
    pope_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The selection is read from ``OUT/results.json`` when the metrics.json is gone, and from a hook's
    ``eval/checkpoint-N/<benchmark>/metrics.json`` (another seed: the record's, not the default)."""
    import shutil

    from eval_hooks.evaluate import rescore
    from eval_hooks.prepare import prepare_benchmark

    data, out = pope_run
    ran = json.loads((out / "pope" / "metrics.json").read_text())
    copy = tmp_path / "eval"
    shutil.copytree(out, copy)
    (copy / "pope" / "metrics.json").unlink()
    (copy / "pope" / "predictions.metrics.json").unlink(missing_ok=True)
    assert main(["eval", "score", "--benchmarks", "pope", "--data", f"pope={data}", "--predictions", str(copy)]) == 0
    scored = json.loads((copy / "pope" / "predictions.metrics.json").read_text())
    assert scored["selection"] == ran["selection"] and scored["selection_source"] == str(copy / "results.json")
    # a hook's checkpoint folder, drawn with seed 5: eval score needs no --limit-seed
    hook = tmp_path / "run" / "eval" / "checkpoint-4" / "pope"
    hook.mkdir(parents=True)
    prepared = prepare_benchmark("pope", data={"pope": data}, limit=3, limit_seed=5)
    (hook / "predictions.jsonl").write_text(
        "".join(json.dumps({"id": i.id, "prediction": "Yes"}) + "\n" for i in prepared.items)
    )
    (hook / "metrics.json").write_text(json.dumps({"data": {"limit": 3}, "selection": prepared.selection}))
    result = rescore("pope", data, hook / "predictions.jsonl")
    assert result["selection"] == prepared.selection and result["counts"]["predicted"] == 3
    with pytest.raises(UserError, match=r"--limit-seed 0 \(the run's: 5\)"):
        rescore("pope", data, hook / "predictions.jsonl", limit_seed=0)


def test_recipes_take_name_n_and_the_limit_keys(tmp_path: Path) -> None:
    from eval_hooks.callback import EvalHookCallback
    from finetune.configs import GRPOScriptArguments
    from finetune.recipe import check_benchmark_names

    check_benchmark_names(["amber_discriminative:1000", "hallusionbench:300"], "eval_benchmarks")
    with pytest.raises(UserError, match="eval_benchmarks: 'pope:-1'"):
        check_benchmark_names(["pope:-1"], "eval_benchmarks")
    hook = EvalHookCallback(["pope:3", "finer"], None, limit=10, limit_seed=7, limit_mode="first")
    assert (hook.limits, hook.limit, hook.limit_seed, hook.limit_mode) == ({"pope": 3}, 10, 7, "first")
    assert GRPOScriptArguments(dataset_path="x").eval_limit_mode == "stratified"
    with pytest.raises(UserError, match="eval_limit_mode: expected one of stratified, first, got 'last'"):
        GRPOScriptArguments(dataset_path="x", eval_limit_mode="last")


# -------------------------------------------------------------------------------------- the README's data flow


def readme_command(start: str) -> list[str]:
    """The README's command that starts with ``start`` (continuation lines joined, comment dropped)."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(start))
    return shlex.split(line.split("  #")[0])


def with_options(command: list[str], values: dict[str, str | None]) -> list[str]:
    """``command`` with the options in ``values`` set (None: dropped) and appended when absent."""
    out, skip, seen = [], False, set()
    for index, token in enumerate(command):
        if skip:
            skip = False
            continue
        if token in values:
            seen.add(token)
            takes_value = index + 1 < len(command) and not command[index + 1].startswith("--")
            skip = takes_value
            if values[token] is not None:
                out += [token, values[token]]
            continue
        out.append(token)
    return out + [
        item for key, value in values.items() if key not in seen and value is not None for item in (key, value)
    ]


def test_the_readmes_data_flow_builds_what_eval_run_reads(
    tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from miniature.tiny.clip import build_tiny_clip

    monkeypatch.chdir(tmp_path)
    assert main(["build", "synthetic-world", "--out", "data/world", "--train-images", "8", "--val-images", "16"]) == 0
    clip = build_tiny_clip(tmp_path / "clip")
    world = {"--annotations": "data/world/val/instances.json", "--image-root": "data/world/val/images"}
    oric = with_options(
        readme_command("veritune build oric-bench"),
        {
            **world,
            "--context-judge": "cooccurrence",
            "--llm-base-url": None,
            "--llm-model": None,
            **{"--num-yes": "3", "--num-no": "3", "--yes-per-image": "1", "--no-per-image": "1"},
            **{"--context-judge-threshold": "0.5", "--clip-model": str(clip), "--clip-cache": "clip-cache"},
        },
    )
    graphs = {"--scene-graphs": "data/world/val/scene_graphs.json", "--image-root": "data/world/val/images"}
    finer = with_options(readme_command("veritune build finer-bench --scene-graphs"), graphs)
    finer_yn = with_options(readme_command("veritune build finer-bench --protocol yn"), graphs)
    for command in (oric, finer, finer_yn):
        assert main(command[1:]) == 0, command
    run = readme_command("veritune eval run --model outputs/qwen3vl-8b-oric-grpo --benchmarks oric_bench_r1")
    run = with_options(
        run,
        {
            "--model": str(tiny_qwen3vl),
            "--benchmarks": "oric_bench_r1,finer,finer_yn",
            "--limit": "4",
            "--max-new-tokens": "2",
        },
    )
    assert run[run.index("--data-root") + 1] == "data/benchmarks"
    assert main([*run[1:], "--allow-unresolved"]) == 0  # the tiny model writes no <SOLUTION> block or letter
    out = Path(run[run.index("--out") + 1])
    for name in ("oric_bench_r1", "finer", "finer_yn"):
        result = json.loads((out / name / "metrics.json").read_text())
        assert result["counts"]["missing_images"] == 0, name
        assert result["counts"]["predicted"] == result["selection"]["items"] > 0, name
