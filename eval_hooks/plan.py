"""The eval plan: which benchmarks to evaluate, with which limits, on which files, and how, parsed and checked
once from a recipe's ``eval_*`` keys (:meth:`EvalPlan.from_script_args`: the training hook and the recipe check)
or from ``veritune eval run`` / ``eval watch`` / ``eval score`` flags (:meth:`EvalPlan.from_cli`). Every consumer
takes the plan: nothing re-parses a benchmark list, a ``NAME:N`` limit, a ``BENCHMARK=PATH`` or an image root.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import UserError
from eval_hooks.paths import (
    ImageRoots,
    parse_benchmark_limits,
    parse_benchmark_names,
    parse_data_overrides,
    parse_image_roots,
)
from eval_hooks.prepare import PreparedBenchmark, prepare_benchmark
from eval_hooks.registry import get_benchmark
from eval_hooks.selection import DEFAULT_LIMIT_MODE, DEFAULT_LIMIT_SEED, check_limit


def parse_benchmark_list(names: str | list[str], source: str) -> list[str]:
    """A benchmark list as :func:`eval_hooks.paths.parse_benchmark_names` reads it (``NAME:N`` allowed, presets
    expanded), every dotted path imported: its error is named after ``source``.

    Raises:
        UserError: ``"<source>: unknown benchmark 'x' (did you mean 'y'? ...)"`` and the like, one line.
    """
    entries = parse_benchmark_names(names, source, allow_limits=True)
    for entry in entries:
        spec = entry.rpartition(":")[0] or entry
        if "." in spec:  # a dotted path: it must import
            try:
                get_benchmark(spec)
            except UserError as err:
                raise UserError(f"{source}: {err}") from None
    return entries


# The recipe keys an eval plan is made of (ScriptArguments, finetune/configs.py).
SCRIPT_KEYS = (
    "eval_benchmarks",
    "eval_on_save",
    "eval_final_benchmarks",
    "eval_at_start",
    "eval_data_root",
    "eval_data",
    "eval_image_root",
    "eval_limit",
    "eval_limit_seed",
    "eval_limit_mode",
    "eval_batch_size",
    "eval_allow_partial",
    "eval_backend",
)
# EvalPlan.of's plans: id of the recipe's ScriptArguments -> (the eval_* values parsed, the plan). Kept beside the
# recipe, not on it: its attributes are written out as the run's settings.
_PLANS: dict[int, tuple[tuple[str, ...], EvalPlan]] = {}


@dataclass
class EvalPlan:
    """What to evaluate and how (see the module docstring).

    ``benchmarks`` are evaluated on every saved checkpoint by the hook (by ``eval run`` / ``eval watch``: the
    benchmarks of the command), ``final_benchmarks`` once, after the final checkpoint (the hook only); each
    name's limit is its ``NAME:N`` (``limits``, ``final_limits``), else ``limit``. ``image_roots`` is
    ``{None: PATH for every benchmark, NAME: PATH for one}`` (:func:`eval_hooks.paths.parse_image_roots`).
    ``allow_unresolved``: a mostly unresolved result is scored and labelled, not refused (always so in the
    hook and ``eval watch``). ``enabled`` is False for a recipe without an eval hook.
    """

    benchmarks: list[str] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    final_benchmarks: list[str] = field(default_factory=list)
    final_limits: dict[str, int] = field(default_factory=dict)
    data_root: Path | None = None
    data: dict[str, Path] = field(default_factory=dict)
    image_roots: ImageRoots = field(default_factory=dict)
    limit: int | None = None
    limit_seed: int = DEFAULT_LIMIT_SEED
    limit_mode: str = DEFAULT_LIMIT_MODE
    batch_size: int = 8
    max_new_tokens: int | None = None
    strict_official: bool = False
    allow_partial: bool = False
    allow_unresolved: bool = False
    backend: str = "auto"
    dtype: str = "auto"
    at_start: bool = False
    enabled: bool = True

    @property
    def image_root(self) -> Path | None:
        """The image root given for every benchmark (a recipe's ``eval_image_root``, a plain ``--image-root``)."""
        return self.image_roots.get(None)

    def limit_of(self, name: str, *, final: bool = False) -> int | None:
        """The limit of benchmark ``name``: its ``NAME:N`` in its list (per save or ``final``), else ``limit``."""
        return (self.final_limits if final else self.limits).get(name, self.limit)

    def prepare(self, name: str, limit: int | None) -> PreparedBenchmark:
        """Benchmark ``name`` located, loaded and limited to ``limit`` as the plan says
        (:func:`eval_hooks.prepare.prepare_benchmark`)."""
        return prepare_benchmark(
            name,
            data_root=self.data_root,
            data=self.data,
            image_root=self.image_roots,
            limit=limit,
            max_new_tokens=self.max_new_tokens,
            strict_official=self.strict_official,
            allow_partial=self.allow_partial,
            limit_seed=self.limit_seed,
            limit_mode=self.limit_mode,
            allow_unresolved=self.allow_unresolved,
        )

    @classmethod
    def from_script_args(cls, args: Any) -> EvalPlan:
        """The plan of a recipe's ``eval_*`` keys (``ScriptArguments``; any object with those attributes): its
        benchmark lists checked (``eval_benchmarks`` always, a dotted path must import), and, when the recipe
        has an eval hook (``eval_on_save`` with ``eval_benchmarks``, or ``eval_final_benchmarks``; else
        ``enabled`` is False), ``eval_limit`` and ``eval_data``, and that no benchmark needs an LLM judge (the
        hook has none: judged suites are scored with ``eval score``). The hook never refuses a mostly
        unresolved checkpoint: ``allow_unresolved`` is set.

        Raises:
            UserError: one line naming the recipe key.
        """
        from eval_hooks.evaluate import require_judges

        benchmarks, final = (
            parse_benchmark_list(names, key) if names else []
            for key, names in (
                ("eval_benchmarks", args.eval_benchmarks),
                ("eval_final_benchmarks", args.eval_final_benchmarks),
            )
        )
        enabled = bool((args.eval_on_save and benchmarks) or final)
        per_save, limits = parse_benchmark_limits(benchmarks if args.eval_on_save else [])
        final_names, final_limits = parse_benchmark_limits(final)
        plan = cls(
            benchmarks=per_save,
            limits=limits,
            final_benchmarks=final_names,
            final_limits=final_limits,
            data_root=Path(args.eval_data_root) if args.eval_data_root else None,
            image_roots={None: Path(args.eval_image_root)} if args.eval_image_root else {},
            limit=args.eval_limit,
            limit_seed=args.eval_limit_seed,
            limit_mode=args.eval_limit_mode,
            batch_size=args.eval_batch_size,
            max_new_tokens=getattr(args, "eval_max_new_tokens", None),
            allow_partial=args.eval_allow_partial,
            allow_unresolved=True,
            backend=args.eval_backend,
            at_start=args.eval_at_start,
            enabled=enabled,
        )
        if enabled:
            # A recipe may name final benchmarks only; eval_data may name a benchmark of either list.
            plan.data = parse_data_overrides(args.eval_data, "eval_data", [*benchmarks, *final])
            check_limit(plan.limit, plan.limit_mode, "eval_limit")
            require_judges([*plan.benchmarks, *plan.final_benchmarks], None)
        return plan

    @classmethod
    def of(cls, args: Any) -> EvalPlan:
        """:meth:`from_script_args`, parsed once per recipe: the plan is kept beside ``args`` and parsed again only
        when one of its ``eval_*`` keys has changed since (the recipe check, the path check and the callbacks of
        one run share it)."""
        key = tuple(repr(getattr(args, name, None)) for name in SCRIPT_KEYS)
        cached = _PLANS.get(id(args))
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = cls.from_script_args(args)
        if cached is None:
            try:  # forgotten with its recipe; an object that takes no weak reference is parsed each time
                weakref.finalize(args, _PLANS.pop, id(args), None)
            except TypeError:
                return plan
        _PLANS[id(args)] = (key, plan)
        return plan

    @classmethod
    def for_hook(cls, benchmarks: list[str], data_root: str | Path | None, **settings: Any) -> EvalPlan:
        """The plan of an eval hook built by hand (``EvalHookCallback(["pope:3"], data_root, limit=...)``):
        ``benchmarks`` evaluated on every save, ``settings`` the hook's former keywords (``limit``,
        ``batch_size``, ``data``, ``image_root``, ``max_new_tokens``, ``final_benchmarks``, ``at_start``,
        ``backend``, ``allow_partial``, ``limit_seed``, ``limit_mode``), parsed as a recipe's keys are."""
        from types import SimpleNamespace

        known = {
            "limit": None,
            "batch_size": 8,
            "data": None,
            "image_root": None,
            "max_new_tokens": None,
            "final_benchmarks": None,
            "at_start": False,
            "backend": "auto",
            "allow_partial": False,
            "limit_seed": DEFAULT_LIMIT_SEED,
            "limit_mode": DEFAULT_LIMIT_MODE,
        }
        unknown = set(settings) - set(known)
        if unknown:
            raise TypeError(f"EvalPlan.for_hook: unknown settings {sorted(unknown)}")
        values = {**known, **settings}
        args = SimpleNamespace(
            eval_benchmarks=list(benchmarks),
            eval_on_save=True,
            eval_final_benchmarks=list(values["final_benchmarks"] or []),
            eval_data_root=data_root,
            eval_data=[f"{name}={path}" for name, path in (values["data"] or {}).items()],
            eval_image_root=values["image_root"],
            eval_limit=values["limit"],
            eval_limit_seed=values["limit_seed"],
            eval_limit_mode=values["limit_mode"],
            eval_batch_size=values["batch_size"],
            eval_max_new_tokens=values["max_new_tokens"],
            eval_allow_partial=values["allow_partial"],
            eval_backend=values["backend"],
            eval_at_start=values["at_start"],
        )
        return cls.from_script_args(args)

    @classmethod
    def from_cli(cls, ns: Any, *, allow_unresolved: bool | None = None) -> EvalPlan:
        """The plan of ``eval run`` / ``eval watch`` / ``eval score`` flags: ``--limit`` and ``--limit-mode``
        checked, ``--benchmarks`` (``NAME:N`` allowed), then ``--data`` and ``--image-root`` (each entry naming
        a benchmark of the list). ``allow_unresolved``: default ``--allow-unresolved`` (``eval watch`` always
        scores and labels).

        Raises:
            UserError: one line naming the flag.
        """
        check_limit(ns.limit, ns.limit_mode or DEFAULT_LIMIT_MODE)
        names, limits = parse_benchmark_limits(parse_benchmark_names(ns.benchmarks))
        data = parse_data_overrides(ns.data, benchmarks=names)
        image_roots = parse_image_roots(ns.image_root, benchmarks=names)
        return cls(
            benchmarks=names,
            limits=limits,
            data_root=ns.data_root,
            data=data,
            image_roots=image_roots,
            limit=ns.limit,
            limit_seed=DEFAULT_LIMIT_SEED if ns.limit_seed is None else ns.limit_seed,
            limit_mode=ns.limit_mode or DEFAULT_LIMIT_MODE,
            batch_size=getattr(ns, "batch_size", 8),
            max_new_tokens=getattr(ns, "max_new_tokens", None),
            strict_official=getattr(ns, "strict_official", False),
            allow_partial=ns.allow_partial,
            allow_unresolved=getattr(ns, "allow_unresolved", False) if allow_unresolved is None else allow_unresolved,
            backend=getattr(ns, "backend", "transformers"),
            dtype=getattr(ns, "dtype", "auto"),
        )
