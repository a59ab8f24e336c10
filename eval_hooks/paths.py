"""Where a benchmark's files and images are, and the one parser of each location syntax: benchmark lists
(``NAME:N`` limits, presets), ``BENCHMARK=PATH`` (``--data``, ``eval_data``), ``--image-root`` (a plain ``PATH``
or ``BENCHMARK=PATH``), the image folder a builder recorded, and a benchmark's layout under a data root.
Shared by ``eval run`` / ``eval watch`` / ``eval score``, the recipes (:mod:`eval_hooks.plan`) and the hook."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from pathlib import Path

from core.errors import UserError
from core.io import dataset_manifest
from eval_hooks.registry import BENCHMARKS, get_benchmark, preset_members


def check_benchmark_name(name: str, source: str) -> None:
    """Refuse a name that is neither in the registry nor a dotted path, naming the closest registered one."""
    if name in BENCHMARKS or "." in name:
        return
    close = difflib.get_close_matches(name, list(BENCHMARKS), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UserError(
        f"{source}: unknown benchmark {name!r} ({hint}known: {', '.join(BENCHMARKS)}, or a dotted path to a Benchmark)"
    )


def parse_benchmark_names(
    text: str | list[str], source: str = "--benchmarks", *, allow_limits: bool = True
) -> list[str]:
    """Benchmark names from ``"a,b"`` or a list of such strings (the recipe's ``eval_benchmarks``), in order,
    without repeats. The one parser of benchmark lists, for ``eval run``, ``eval score``, ``eval watch`` and the
    recipes alike: an empty entry (``a,,b``), an unknown name, a benchmark given twice or an empty list is a
    one-line error, never silently dropped. With ``allow_limits``, an entry may be ``NAME:N`` (at most N
    questions of that benchmark, instead of ``--limit``; :func:`parse_benchmark_limits` splits them off)."""
    entries = [text] if isinstance(text, str) else [str(entry) for entry in text]
    names = []
    for entry in entries:
        for part in entry.split(","):
            name = part.strip()
            if not name:
                raise UserError(
                    f"{source}: empty entry in {entry!r} (give comma-separated names, e.g. pope,oric_bench_r1)"
                )
            base, sep, limit = name.rpartition(":")
            if allow_limits and sep:
                base, limit = base.strip(), limit.strip()
                if not (limit.isascii() and limit.isdigit() and int(limit) >= 1):
                    raise UserError(f"{source}: {name!r}: expected NAME or NAME:N (N a whole number, at least 1)")
                name = f"{base}:{int(limit)}"
            else:
                base = name
            members = preset_members(base, limit if allow_limits and sep else "")
            if members is not None:  # a preset ("general") stands for its benchmarks, each with the same limit
                names.extend(members)
                continue
            check_benchmark_name(base, source)
            names.append(name)
    if not names:
        raise UserError(f"{source}: give at least one benchmark name")
    names = list(dict.fromkeys(names))
    bases = [name.rpartition(":")[0] or name for name in names]
    twice = [base for base, count in Counter(bases).items() if count > 1]
    if twice:
        given = ", ".join(name for name in names if (name.rpartition(":")[0] or name) == twice[0])
        raise UserError(f"{source}: {twice[0]} is given twice ({given}); give each benchmark once")
    return names


def parse_benchmark_limits(entries: list[str]) -> tuple[list[str], dict[str, int]]:
    """``["pope:200", "oric_bench_r1"]`` (from :func:`parse_benchmark_names`) -> the names and the per-benchmark
    limits (``NAME:N`` overrides ``--limit`` / ``eval_limit`` for that benchmark: a quick POPE sample beside
    a full ORIC-Bench, say)."""
    names, limits = [], {}
    for entry in entries:
        name, sep, count = str(entry).rpartition(":")
        if sep and name and count.strip().isdigit():
            names.append(name.strip())
            limits[name.strip()] = int(count)
        elif sep and name:
            raise UserError(f"eval_benchmarks: {entry!r}: expected NAME or NAME:N (N a whole number, at least 1)")
        else:
            names.append(str(entry).strip())
    return names, limits


def parse_data_overrides(
    values: list[str], source: str = "--data", benchmarks: list[str] | None = None
) -> dict[str, Path]:
    """``["pope=data/pope", ...]`` -> ``{"pope": Path("data/pope")}``: the one ``BENCHMARK=PATH`` syntax of
    ``eval run``, ``eval score``, ``eval watch`` and the recipes' ``eval_data``. A malformed entry, or one
    naming a benchmark that is not being evaluated, is an error (it would otherwise be silently unused)."""
    overrides: dict[str, Path] = {}
    for value in values:
        name, sep, path = str(value).partition("=")
        name = name.strip()
        if not sep or not name or not path.strip():
            raise UserError(f"{source} {value!r}: expected BENCHMARK=PATH, e.g. pope=data/benchmarks/pope")
        if benchmarks is not None and name not in {b.rpartition(":")[0] or b for b in benchmarks}:
            raise UserError(
                f"{source} {value!r}: {name!r} is not among the benchmarks being evaluated ({', '.join(benchmarks)})"
            )
        overrides[name] = Path(path.strip())
    return overrides


ImageRoots = dict[str | None, Path]  # --image-root: {None: PATH for every benchmark, NAME: PATH for one}


def parse_image_roots(
    values: list[str] | str | Path | None, source: str = "--image-root", benchmarks: list[str] | None = None
) -> ImageRoots:
    """``--image-root`` values: a plain ``PATH`` (every benchmark's images, as before) and/or ``BENCHMARK=PATH``
    entries (one benchmark's; the syntax of ``--data``, :func:`parse_data_overrides`). An entry is
    ``BENCHMARK=PATH`` when the text before its first ``=`` names no folder (holds no ``/``); two plain paths
    are an error."""
    if values is None:
        return {}
    entries = [values] if isinstance(values, (str, Path)) else list(values)
    roots: ImageRoots = {}
    for value in map(str, entries):
        name, sep, _ = value.partition("=")
        if sep and name.strip() and "/" not in name and "\\" not in name:
            roots.update(parse_data_overrides([value], source, benchmarks))
            continue
        if None in roots:
            raise UserError(
                f"{source} {value!r}: a second plain path (the first: {roots[None]}); give BENCHMARK=PATH for "
                "the benchmarks whose images are elsewhere"
            )
        roots[None] = Path(value)
    return roots


def image_root_of(name: str, image_root: Path | ImageRoots | None) -> Path | None:
    """The image root of benchmark ``name`` (``name`` may carry a ``:N`` limit): its own ``NAME=PATH``, else the
    plain ``--image-root``, else None (the benchmark's own default)."""
    if not isinstance(image_root, dict):
        return Path(image_root) if image_root else None
    base = name.rpartition(":")[0] or name
    return image_root.get(name) or image_root.get(base) or image_root.get(None)


def recorded_image_root(data_path: Path) -> Path | None:
    """The image folder a veritune builder recorded for ``data_path`` (``image_root`` in the manifest beside
    the file, or beside the files of a folder: ``veritune build finer-bench`` and ``oric-bench`` write it),
    when it names one existing folder; else None. A benchmark built with ``--image-root`` is thus evaluated
    on the images it was built from, with no copy under ``--data-root``."""
    data_path = Path(data_path)
    files = sorted(p for p in data_path.iterdir() if p.is_file()) if data_path.is_dir() else [data_path]
    roots = set()
    for file in files:
        manifest = dataset_manifest(file)
        if manifest is None or file == manifest:
            continue
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("image_root")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(recorded, str) and recorded:
            roots.add(Path(recorded))
    if len(roots) == 1 and next(iter(roots)).is_dir():
        return next(iter(roots))
    return None


def resolve_paths(
    name: str, data_root: Path | None, data: dict[str, Path], image_root: Path | ImageRoots | None
) -> tuple[Path, Path | None]:
    """Where a benchmark's files are: an explicit ``--data name=PATH`` or its layout under ``--data-root``; its
    images: its ``--image-root`` (:func:`image_root_of`), else the folder its builder recorded
    (:func:`recorded_image_root`), else the layout's (the loader's own default for ``--data``)."""
    benchmark = get_benchmark(name)
    image_root = image_root_of(name, image_root)
    if name in data:
        data_path = Path(data[name])
        return data_path, image_root or (recorded_image_root(data_path) if data_path.exists() else None)
    if data_root is None:
        raise UserError(f"{name}: give --data-root DIR (expects {benchmark.data_layout}) or --data {name}=PATH")
    data_path, default_images = benchmark.default_paths(Path(data_root))
    return data_path, image_root or (recorded_image_root(data_path) if data_path.exists() else None) or default_images
