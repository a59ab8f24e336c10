"""The benchmark registry: ``BENCHMARKS`` plus :func:`get_benchmark`, with a dotted-path fallback
(``my_pkg.my_module.MyBenchmark``) for experiments."""

from __future__ import annotations

import importlib

from eval_hooks.base import Benchmark
from eval_hooks.benchmarks.amber import AmberDiscriminative
from eval_hooks.benchmarks.amber_generative import AmberGenerative
from eval_hooks.benchmarks.finer import Finer
from eval_hooks.benchmarks.hallusionbench import HallusionBench
from eval_hooks.benchmarks.mcq_tsv import McqTsv, MMStar
from eval_hooks.benchmarks.mioh import Mioh
from eval_hooks.benchmarks.orbit import Orbit
from eval_hooks.benchmarks.oric_bench import OricBench, OricBenchCot, OricBenchR1
from eval_hooks.benchmarks.pope import Pope
from veritune.errors import UserError

BENCHMARKS: dict[str, type[Benchmark]] = {
    "oric_bench": OricBench,
    "oric_bench_r1": OricBenchR1,
    "oric_bench_cot": OricBenchCot,
    "pope": Pope,
    "hallusionbench": HallusionBench,
    "amber_discriminative": AmberDiscriminative,
    "amber_generative": AmberGenerative,
    "finer": Finer,
    "mioh": Mioh,
    "orbit": Orbit,
    "mmstar": MMStar,
    "mcq_tsv": McqTsv,
}


def get_benchmark(name: str) -> Benchmark:
    """A benchmark instance by registry name or dotted path to a :class:`Benchmark` subclass."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]()
    module_name, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr) if module_name else None
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        raise UserError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)} or a dotted path to a Benchmark")
    return cls()
