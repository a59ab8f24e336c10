"""The eval plan (eval_hooks/plan.py): a recipe's eval_* keys and the eval commands' flags parsed once, by one
parser each, with the messages the checks had before; the recipe check, the training hook, eval run, eval watch
and eval score take the plan instead of parsing again."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from core.errors import UserError
from eval_hooks.plan import EvalPlan
from finetune.configs import ScriptArguments

REPO_ROOT = Path(__file__).resolve().parent.parent
PARSERS = {
    "parse_benchmark_names",
    "parse_benchmark_limits",
    "parse_data_overrides",
    "parse_image_roots",
    "check_limit",
}


@pytest.mark.parametrize(
    "path", ["eval_hooks/cli.py", "eval_hooks/callback.py", "finetune/training.py", "finetune/recipe.py"]
)
def test_the_consumers_parse_nothing_themselves(path: str) -> None:
    tree = ast.parse((REPO_ROOT / path).read_text(encoding="utf-8"))
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert not used & PARSERS, f"{path} parses eval settings itself: {sorted(used & PARSERS)}"


def test_a_recipe_plan_is_parsed_once_and_shared_by_the_check_and_the_hook() -> None:
    from finetune.training import eval_hook

    args = ScriptArguments(
        eval_benchmarks=["pope:3", "oric_bench"],
        eval_on_save=True,
        eval_final_benchmarks=["general:5"],
        eval_limit=10,
        eval_data=["pope=data/pope"],
        eval_image_root="images",
    )  # the check: ScriptArguments.__post_init__ parses the plan
    plan = EvalPlan.of(args)
    hook = eval_hook(args)
    assert hook is not None and hook.plan is plan
    assert (plan.benchmarks, plan.limit_of("pope"), plan.limit_of("oric_bench")) == (["pope", "oric_bench"], 3, 10)
    assert plan.limit_of("textvqa", final=True) == 5 and "textvqa" in plan.final_benchmarks
    assert plan.data == {"pope": Path("data/pope")} and plan.image_root == Path("images")
    assert plan.allow_unresolved  # the hook scores and labels a mostly unresolved checkpoint
    args.eval_limit = 20  # a changed key is parsed again
    assert EvalPlan.of(args) is not plan and EvalPlan.of(args).limit_of("oric_bench") == 20


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"eval_final_benchmarks": ["popee"]}, r"^eval_final_benchmarks: unknown benchmark 'popee' \(did you mean"),
        ({"eval_benchmarks": ["pope:0"], "eval_on_save": True}, r"^eval_benchmarks: 'pope:0': expected NAME or NAME:N"),
        (
            {"eval_benchmarks": ["pope"], "eval_on_save": True, "eval_data": ["mme=x"]},
            r"^eval_data 'mme=x': 'mme' is not among the benchmarks being evaluated \(pope\)$",
        ),
        ({"eval_final_benchmarks": ["mmhal"]}, r"^mmhal: scored by an LLM judge"),
    ],
)
def test_a_recipe_plan_refuses_with_one_line(settings: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        EvalPlan.from_script_args(ScriptArguments(**settings))


def test_a_recipe_without_a_hook_checks_its_names_only() -> None:
    plan = EvalPlan.from_script_args(ScriptArguments(eval_benchmarks=["pope"], eval_data=["mme=x"]))
    assert not plan.enabled and plan.benchmarks == [] and plan.data == {}
    with pytest.raises(UserError, match="^eval_benchmarks: unknown benchmark 'popee'"):
        EvalPlan.from_script_args(ScriptArguments(eval_benchmarks=["popee"]))


def _flags(**given: object) -> argparse.Namespace:
    flags = {
        "benchmarks": "pope:3,oric_bench",
        "data_root": None,
        "data": [],
        "image_root": None,
        "limit": None,
        "limit_seed": None,
        "limit_mode": None,
        "allow_partial": False,
    }
    return argparse.Namespace(**{**flags, **given})


def test_a_cli_plan_reads_the_flags_of_eval_run_watch_and_score() -> None:
    plan = EvalPlan.from_cli(
        _flags(limit=7, data=["pope=p"], image_root=["img", "oric_bench=o"], batch_size=4, allow_unresolved=True)
    )
    assert (plan.benchmarks, plan.limit_of("pope"), plan.limit_of("oric_bench")) == (["pope", "oric_bench"], 3, 7)
    assert plan.image_roots == {None: Path("img"), "oric_bench": Path("o")} and plan.data == {"pope": Path("p")}
    assert (plan.limit_seed, plan.limit_mode, plan.batch_size, plan.allow_unresolved) == (0, "stratified", 4, True)
    assert EvalPlan.from_cli(_flags(), allow_unresolved=True).allow_unresolved  # eval watch: always labelled
    with pytest.raises(UserError, match=r"^--limit: must be at least 1, got 0$"):
        EvalPlan.from_cli(_flags(limit=0))
    with pytest.raises(UserError, match=r"^--data 'mme=x': 'mme' is not among the benchmarks being evaluated"):
        EvalPlan.from_cli(_flags(data=["mme=x"]))
