"""The benchmark registry: a benchmark registers itself by being a module of ``eval_hooks/benchmarks/``,
docs/EVALUATION.md's one benchmark table lists exactly the registered names, and ``--strict-official``
reaches ``Benchmark.score`` as an argument (also for a benchmark written without the parameter)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import eval_hooks.benchmarks
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.registry import BENCHMARKS, get_benchmark

REPO_ROOT = Path(__file__).resolve().parent.parent


def documented_benchmarks() -> list[str]:
    """The names in the first column of docs/EVALUATION.md's benchmark table (a row may name several)."""
    text = (REPO_ROOT / "docs" / "EVALUATION.md").read_text(encoding="utf-8")
    table = text.split("| name | files | images | scored as |", 1)[1].split("\n\n", 1)[0]
    names = []
    for row in table.splitlines()[2:]:
        names += re.findall(r"`([a-z0-9_]+)`", row.split(" | ")[0])
    return names


def test_every_benchmark_module_registers_its_benchmarks() -> None:
    defined = set()
    for info in pkgutil.iter_modules(eval_hooks.benchmarks.__path__):
        module = importlib.import_module(f"eval_hooks.benchmarks.{info.name}")
        defined |= {
            cls
            for cls in vars(module).values()
            if isinstance(cls, type)
            and issubclass(cls, Benchmark)
            and cls.__module__ == module.__name__
            and "name" in cls.__dict__
        }
    assert defined == set(BENCHMARKS.values())
    assert all(cls.name == name for name, cls in BENCHMARKS.items())
    assert (
        "pope" in BENCHMARKS
        and "oric_bench_r1" in BENCHMARKS
        and "VlmevalTsv" not in {cls.__name__ for cls in BENCHMARKS.values()}
    )  # a base class without its own name is no benchmark


def test_the_docs_table_lists_exactly_the_registered_benchmarks() -> None:
    documented = documented_benchmarks()
    assert len(documented) == len(set(documented)), "a benchmark has two rows in docs/EVALUATION.md"
    assert sorted(documented) == sorted(BENCHMARKS), (
        f"docs/EVALUATION.md's benchmark table and the registry differ: "
        f"undocumented {sorted(set(BENCHMARKS) - set(documented))}, unknown {sorted(set(documented) - set(BENCHMARKS))}"
    )


class _NoStrictMode(Benchmark):
    """A dotted-path benchmark written with the two-argument ``score``: the flag is accepted and changes nothing."""

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        return [EvalItem(id="1", prompt="Is there a cat?")]

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        return {"metrics": {"answered": float(len(predictions))}, "tables": {}, "counts": {}}


def test_strict_official_is_an_argument_of_score() -> None:
    from eval_hooks.evaluate import score_benchmark

    amber = get_benchmark("amber_discriminative")
    items = [EvalItem(id="1", prompt="Is there a cat?", meta={"truth": "yes", "type": "existence"})]
    relaxed = amber.score(items, {"1": "Yes, there is."})
    strict = amber.score(items, {"1": "Yes, there is."}, strict_official=True)
    assert relaxed["answer_normalisation"]["mode"] == "veritune_yes_no"
    assert strict["answer_normalisation"]["mode"] == "strict_official"
    assert not hasattr(amber, "strict_official")  # nothing is set on the instance

    name = f"{__name__}._NoStrictMode"
    plain = score_benchmark(name, _NoStrictMode().load(Path(".")), {"1": "yes"}, strict_official=True)
    assert plain["metrics"]["answered"] == 1.0 and plain["strict_official"] is True
