"""Rollout rounds (``rollout_batch_prompts``) through the real entry point on the tiny model: one ``generate``
round serves R optimizer steps while each step keeps the small-batch run's prompts, completions and
accumulation, and the first update equals the small-batch run's when both train on the same completions.

Each run trains 2 prompts x G = 4 completions per optimizer step (2 micro-steps of 4); the small-batch and
rollout runs compared train one epoch of 8 prompts (4 optimizer steps), the rollout runs generating 4 prompts
per round (R = 2 steps per round).
tests/rollout_probe.py records each run's generation rounds and micro-steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT, entry_env

RECIPE = "recipes/miniature/tiny_oric_demo.yaml"
SMALL = ["--global_batch_prompts", "2"]  # 2 prompts x G = 4 = 8 completions per optimizer step
ROLLOUT = [*SMALL, "--rollout_batch_prompts", "4"]  # 2 optimizer steps per round


def probe(
    model: Path, data: tuple[Path, Path], out: Path, *extra: str, same_completions: bool = False
) -> tuple[dict[str, Any], str]:
    """Run tests/rollout_probe.py for one epoch; the record and the console."""
    out.mkdir(parents=True)
    command = [sys.executable, str(REPO_ROOT / "tests" / "rollout_probe.py"), str(out / "record.json")]
    if same_completions:
        command += ["--same-completions", "8"]  # one optimizer step's rows: 2 prompts x G = 4
    command += [RECIPE, "--model_name_or_path", str(model), "--dataset_path", str(data[0])]
    command += ["--image_root", str(data[1]), "--output_dir", str(out / "run"), "--report_to", "none"]
    command += ["--save_strategy", "no", "--max_steps", "-1", "--num_train_epochs", "1", *extra]
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "record.json").read_text()), result.stdout + result.stderr


def train_log(out: Path) -> list[dict[str, Any]]:
    lines = (out / "run" / "train_log.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "loss" in row]


def completions_per_step(record: dict[str, Any]) -> dict[int, int]:
    steps: dict[int, int] = {}
    for micro in record["micro"]:
        steps[micro["step"]] = steps.get(micro["step"], 0) + micro["completions"]
    return steps


def prompt_ids(round_: dict[str, Any]) -> list[str]:
    """A round's prompts in order (its rows hold each prompt G times in a row)."""
    return list(dict.fromkeys(round_["ids"]))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from conftest import write_oric_fixture

    return write_oric_fixture(tmp_path_factory.mktemp("rollout-data"))


@pytest.fixture(scope="module")
def small_and_rollout(
    tiny_qwen3vl: Path, data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, tuple[dict[str, Any], str], tuple[dict[str, Any], str]]:
    """The same epoch with one generation per optimizer step and with rounds of 2 steps, on the same
    completions (tests/rollout_probe.py --same-completions: each step's rows sampled with their own seed,
    TRL's shuffle of a round off; the sampler, the rounds and the accumulation are TRL's own)."""
    root = tmp_path_factory.mktemp("rollout")
    small = probe(tiny_qwen3vl, data, root / "small", *SMALL, same_completions=True)
    rollout = probe(tiny_qwen3vl, data, root / "rollout", *ROLLOUT, same_completions=True)
    return root, small, rollout


def test_one_generate_round_serves_two_optimizer_steps_of_the_small_batch(
    small_and_rollout: tuple[Path, tuple[dict[str, Any], str], tuple[dict[str, Any], str]],
) -> None:
    _, (small, _), (rollout, console) = small_and_rollout
    # Optimizer steps, completions per step and micro-steps (accumulation 2) are the small-batch run's.
    assert completions_per_step(small) == completions_per_step(rollout) == {0: 8, 1: 8, 2: 8, 3: 8}
    assert [m["step"] for m in small["micro"]] == [m["step"] for m in rollout["micro"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    # generate: once per optimizer step in the small run, once per 2 steps with rounds, for twice the prompts.
    assert [r["step"] for r in small["rounds"]] == [0, 1, 2, 3]
    assert [r["step"] for r in rollout["rounds"]] == [0, 2]
    assert [len(r["ids"]) for r in small["rounds"]] == [8] * 4
    assert [len(r["ids"]) for r in rollout["rounds"]] == [16] * 2
    # TRL's sampler draws the same seeded permutation either way: a round holds the prompts of the small run's
    # next 2 steps, in their order, and the epoch sees the same 8 prompts.
    small_ids = [prompt_ids(r) for r in small["rounds"]]
    assert [prompt_ids(r) for r in rollout["rounds"]] == [small_ids[0] + small_ids[1], small_ids[2] + small_ids[3]]
    assert len({i for ids in small_ids for i in ids}) == 8
    assert (
        "steps_per_generation 4: rollout_batch_prompts 4 = 2 optimizer step(s) of 2 prompts per rollout round; "
        "each of 1 process(es) decodes 16 completions per generate call" in console
    )
    assert (
        "rollout: 4 prompts x 4 per round, 2 optimizer step(s) of 2 prompts each; 2 round(s) = 4 steps per epoch "
        "of 8 prompts (0 left out, a new draw each epoch); the last step of a round trains on completions 1 "
        "step(s) old" in console
    )


def test_first_update_equals_the_small_batch_runs_on_the_same_completions(
    small_and_rollout: tuple[Path, tuple[dict[str, Any], str], tuple[dict[str, Any], str]],
) -> None:
    """Left to TRL, the two runs' first steps train on different completions: a round's generate call samples
    16 sequences where the small run samples 8 (another random stream), and TRL shuffles a round's completions
    before cutting it into steps, so the rollout run's first step mixes completions of all 4 of its prompts
    (tests/test_grpo_rollout.py's dynamic-sampling run is such a run). Pinned to the same completions, the
    first step's loss, gradient norm (the accumulation's scaling) and updated weights equal the small-batch
    run's, although the rollout run's PPO ratio divides by old log-probs from the extra forward pass (the small
    run's are the live ones)."""
    import torch

    root, (small, _), (rollout, _) = small_and_rollout
    assert prompt_ids(rollout["rounds"][0])[:2] == prompt_ids(small["rounds"][0])
    first_small, first_rollout = train_log(root / "small")[0], train_log(root / "rollout")[0]
    assert first_small["step"] == first_rollout["step"] == 1
    assert first_rollout["grad_norm"] == pytest.approx(first_small["grad_norm"], rel=1e-6)
    assert first_small["grad_norm"] > 0
    assert first_rollout["loss"] == pytest.approx(first_small["loss"], abs=1e-7)
    assert first_rollout["entropy"] == pytest.approx(first_small["entropy"], rel=1e-6)
    weights_small = torch.load(root / "small" / "step1.pt")
    weights_rollout = torch.load(root / "rollout" / "step1.pt")
    assert weights_small.keys() == weights_rollout.keys()
    for name, value in weights_small.items():
        torch.testing.assert_close(weights_rollout[name], value, rtol=1e-6, atol=1e-7, msg=name)


def test_dynamic_sampling_fills_the_whole_round(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """Dynamic sampling works per generation batch: with rounds it replaces uninformative groups across the
    whole round of 4 prompts, which then serves 2 optimizer steps of 8 completions (TRL untouched here)."""
    import pandas as pd
    from conftest import write_oric_fixture
    from test_dynamic_sampling import CONSTANT_ON, question_object

    data16 = write_oric_fixture(tmp_path / "data", num_items=16)
    extra = [*ROLLOUT, "--max_steps", "2", "--dynamic_sampling", "true", "--log_completions", "true"]
    extra += ["--num_completions_to_print", "0", "--reward_funcs", "learning_rewards.constant_on_yes_reward"]
    extra += ["--reward_weights", "1.0"]
    record, _ = probe(tiny_qwen3vl, data16, tmp_path / "ds", *extra)
    assert [r["step"] for r in record["rounds"]] == [0]
    assert completions_per_step(record) == {0: 8, 1: 8}
    (row, _) = train_log(tmp_path / "ds")
    assert row["dynamic_sampling/filled_groups"] == 0  # enough spreading questions among the 16
    assert row["dynamic_sampling/rounds"] > 1 and row["dynamic_sampling/prompts_drawn"] > 4  # some were replaced
    table = pd.read_parquet(tmp_path / "ds" / "run" / "completions" / "completions_00001.parquet")
    assert len(table) == 16 and table["question_id"].value_counts().eq(4).all()  # the round: 4 whole groups
    assert {question_object(str(p)) for p in table["prompt"]}.isdisjoint(CONSTANT_ON)
    assert (table["advantage"].abs() > 0).all()
