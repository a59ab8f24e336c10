"""The benchmark registry: ``BENCHMARKS`` plus :func:`get_benchmark`, with a dotted-path fallback
(``my_pkg.my_module.MyBenchmark``) for experiments."""

from __future__ import annotations

from eval_hooks.base import Benchmark
from eval_hooks.benchmarks.amber import AmberDiscriminative
from eval_hooks.benchmarks.amber_generative import AmberGenerative
from eval_hooks.benchmarks.chartqa import ChartQA
from eval_hooks.benchmarks.crpe import CrpeRelation
from eval_hooks.benchmarks.dash import DashB
from eval_hooks.benchmarks.finer import Finer
from eval_hooks.benchmarks.finer_yn import FinerYn
from eval_hooks.benchmarks.hallusionbench import HallusionBench
from eval_hooks.benchmarks.haloquest import HaloQuest
from eval_hooks.benchmarks.mcq_tsv import McqTsv, MMStar
from eval_hooks.benchmarks.mioh import Mioh
from eval_hooks.benchmarks.mme import MME
from eval_hooks.benchmarks.mmhal import MmhalBench
from eval_hooks.benchmarks.mmvp import Mmvp
from eval_hooks.benchmarks.naturalbench import NaturalBench
from eval_hooks.benchmarks.orbit import Orbit
from eval_hooks.benchmarks.oric_bench import OricBench, OricBenchCot, OricBenchR1
from eval_hooks.benchmarks.pope import Pope
from eval_hooks.benchmarks.repope import RePope
from eval_hooks.benchmarks.textvqa import TextVQA
from eval_hooks.benchmarks.vlmeval_tsv import VqaTsv, YnTsv
from eval_hooks.benchmarks.vstar import VStar
from veritune.core.errors import UserError
from veritune.core.registry import import_dotted

BENCHMARKS: dict[str, type[Benchmark]] = {
    "oric_bench": OricBench,
    "oric_bench_r1": OricBenchR1,
    "oric_bench_cot": OricBenchCot,
    "pope": Pope,
    "hallusionbench": HallusionBench,
    "amber_discriminative": AmberDiscriminative,
    "amber_generative": AmberGenerative,
    "finer": Finer,
    "finer_yn": FinerYn,
    "mioh": Mioh,
    "orbit": Orbit,
    "mmstar": MMStar,
    "mcq_tsv": McqTsv,
    "mmvp": Mmvp,
    "naturalbench": NaturalBench,
    "repope": RePope,
    "crpe_relation": CrpeRelation,
    "dash_b": DashB,
    "mmhal": MmhalBench,
    "haloquest": HaloQuest,
    "mme": MME,
    "textvqa": TextVQA,
    "chartqa": ChartQA,
    "vstar": VStar,
    "tsv_yn": YnTsv,
    "tsv_vqa": VqaTsv,
}


def get_benchmark(name: str) -> Benchmark:
    """A benchmark instance by registry name or dotted path to a :class:`Benchmark` subclass."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]()
    try:
        cls = import_dotted(name)
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        raise UserError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)} or a dotted path to a Benchmark")
    return cls()


# Named sets of benchmarks for eval_benchmarks / eval_final_benchmarks ("general:100" limits each member).
# general: the six general-ability benchmarks of seed finer_tuning_dpo.txt, Sec. 4.4 and Table 3.
PRESETS: dict[str, tuple[str, ...]] = {"general": ("mmstar", "textvqa", "chartqa", "mmvp", "naturalbench", "vstar")}


def expand_presets(entries: list[str]) -> list[str]:
    """Each preset name (optionally ``name:N``) replaced by its benchmarks (each with the same ``:N``)."""
    expanded = []
    for entry in entries:
        name, sep, count = str(entry).strip().partition(":")
        members = PRESETS.get(name)
        expanded.extend([f"{member}{sep}{count}" for member in members] if members else [str(entry)])
    return list(dict.fromkeys(expanded))
