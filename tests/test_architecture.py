"""The layers of docs/ARCHITECTURE.md, enforced folder by folder: every module imports only from its own
top-level folder or a folder below it (imports inside functions included), no two folders import each other,
and no files import each other in a loop.

    core → rewards → data_builders | eval_hooks → finetune → miniature → veritune

``data_builders`` and ``eval_hooks`` share a layer and do not import each other. ``core`` is the ground,
``veritune`` the roof (the command line and what only it wires), ``miniature`` the CPU miniature.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The top-level folders in their order, bottom to top; folders of one rank do not import each other.
LAYERS = {
    "core": 0,
    "rewards": 1,
    "data_builders": 2,
    "eval_hooks": 2,
    "finetune": 3,
    "miniature": 4,
    "veritune": 5,
}
PACKAGES = tuple(LAYERS)


def layer_of(module: str) -> str:
    """The layer (a key of ``LAYERS``) of a first-party module: its top-level folder."""
    return module.split(".")[0]


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def first_party_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every first-party import of ``path``, at any depth (functions included)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import module`` imports that module; ``from module import name`` the module itself.
            targets = [f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base for alias in node.names]
        else:
            continue
        found += [(node.lineno, target) for target in targets if target.split(".")[0] in PACKAGES]
    return sorted(set(found))


def _is_module(name: str) -> bool:
    path = REPO_ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def library_modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py"))


def upward_imports(path: Path) -> list[str]:
    importer = module_name(path)
    mine = layer_of(importer)
    wrong = []
    for line, target in first_party_imports(path):
        theirs = layer_of(target)
        if LAYERS[theirs] > LAYERS[mine] or (LAYERS[theirs] == LAYERS[mine] and theirs != mine):
            wrong.append(f"{path.relative_to(REPO_ROOT)}:{line}: {importer} ({mine}) imports {target} ({theirs})")
    return wrong


def import_graph() -> dict[str, set[str]]:
    """``{module: the first-party modules it imports}`` over every library module (imports in functions too)."""
    return {module_name(path): {target for _, target in first_party_imports(path)} for path in library_modules()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The loops of ``graph``: each strongly connected component of two or more modules (Tarjan's algorithm),
    and each module that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_layer_map_knows_the_layers() -> None:
    assert [layer_of(name) for name in ("core.io", "rewards.graders", "eval_hooks.cli", "finetune.grpo")] == [
        "core",
        "rewards",
        "eval_hooks",
        "finetune",
    ]
    assert layer_of("miniature.tiny.models") == "miniature" and layer_of("veritune.cli") == "veritune"
    assert LAYERS["data_builders"] == LAYERS["eval_hooks"]
    assert sorted(LAYERS, key=LAYERS.get)[0] == "core" and max(LAYERS, key=LAYERS.get) == "veritune"


def test_every_top_level_python_folder_has_a_layer() -> None:
    """A new top-level package gets a place in ``LAYERS`` (and in docs/ARCHITECTURE.md) before it ships."""
    folders = {path.parent.name for path in REPO_ROOT.glob("*/__init__.py")}
    assert folders == set(LAYERS), folders ^ set(LAYERS)


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    path = REPO_ROOT / "finetune" / "training.py"
    assert any(target.startswith("eval_hooks.") for _, target in first_party_imports(path))


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_module_imports_upward(path: Path) -> None:
    wrong = upward_imports(path)
    assert not wrong, "imports against the layers (docs/ARCHITECTURE.md):\n" + "\n".join(wrong)


def test_no_two_folders_import_each_other() -> None:
    folders: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        folders.setdefault(layer_of(module), set()).update(layer_of(target) for target in targets)
    both_ways = sorted(
        f"{one} <-> {other}"
        for one in folders
        for other in folders[one]
        if one < other and one in folders.get(other, ())
    )
    assert not both_ways, both_ways


def test_no_files_import_each_other_in_a_loop() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "modules that import each other (a loop):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_sees_a_loop() -> None:
    """The loop this rule ended: the demo's pipeline imported its FINER half, which imported the pipeline back."""
    graph = {"old.demo": {"old.finer_half", "core.io"}, "old.finer_half": {"old.demo"}}
    assert import_cycles(graph) == [["old.demo", "old.finer_half"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"a"}}) == [["a"]] and import_cycles({"a": {"b"}, "b": set()}) == []


def test_training_reads_no_file_through_a_benchmark_class() -> None:
    """A file format shared by training and a benchmark (POPE's question file: replay data) has its home below
    both (``core.pope_format``): no finetune/ module imports a benchmark module."""
    wrong = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {target}"
        for path in sorted((REPO_ROOT / "finetune").rglob("*.py"))
        for line, target in first_party_imports(path)
        if target.startswith("eval_hooks.benchmarks")
    ]
    assert not wrong, wrong


# ---- docs/ARCHITECTURE.md stays true: what it names exists, and its "how to add" steps match the code

ARCHITECTURE = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
FIRST_PARTY = r"(?:core|rewards|data_builders|eval_hooks|finetune|miniature|veritune)"


def _resolves(dotted: str) -> bool:
    """``package.module[.attribute...]``: the longest importable module prefix, then attributes."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_python_name_in_the_architecture_doc_exists() -> None:
    import re

    names = sorted(set(re.findall(rf"`({FIRST_PARTY}(?:\.[A-Za-z_]\w*)+)`", ARCHITECTURE)))
    assert len(names) > 20
    missing = [name for name in names if not _resolves(name)]
    assert not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_every_path_in_the_architecture_doc_exists() -> None:
    """Repository paths (``eval_hooks/answers.py``), and the bare file names of the folder table (the
    ``training.py`` of the ``finetune/`` row is ``finetune/training.py``). Placeholders are skipped."""
    import re

    top = {path.name for path in REPO_ROOT.iterdir()}
    missing = []
    for path in set(re.findall(r"`([\w./-]+/[\w./-]*)`", ARCHITECTURE)):
        if path.split("/")[0] in top and not (REPO_ROOT / path).exists():
            missing.append(path)
    rows = re.findall(r"^\| `([\w/]+/)` \| (.*) \|$", ARCHITECTURE, flags=re.MULTILINE)
    assert len(rows) >= 8
    for folder, text in rows:
        for name in re.findall(r"`([\w.]+\.py)`", text):
            if not (REPO_ROOT / folder / name).is_file():
                missing.append(f"{folder}{name}")
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {sorted(missing)}"


def test_every_test_named_in_the_architecture_doc_exists() -> None:
    import re

    tests = "\n".join(path.read_text(encoding="utf-8") for path in (REPO_ROOT / "tests").glob("test_*.py"))
    named = set(re.findall(r"`(test_\w+)`", ARCHITECTURE))
    assert named and all(f"def {name}(" in tests for name in named), named


def test_how_to_add_a_benchmark_matches_the_registry() -> None:
    """The doc's steps: one module in eval_hooks/benchmarks/, no registry edit (it discovers), a docs row."""
    from eval_hooks.registry import BENCHMARKS, discover_benchmarks

    section = ARCHITECTURE.split("## How to add a benchmark, a reward or a recipe", 1)[1]
    assert "`eval_hooks/benchmarks/<name>.py`" in section and "`eval_hooks.registry.discover_benchmarks`" in section
    registry = (REPO_ROOT / "eval_hooks" / "registry.py").read_text(encoding="utf-8")
    assert "from eval_hooks.benchmarks." not in registry  # nothing to add there for a new benchmark
    assert BENCHMARKS == discover_benchmarks()
    assert all(
        cls.__module__ == f"eval_hooks.benchmarks.{cls.__module__.rsplit('.', 1)[-1]}" for cls in BENCHMARKS.values()
    )


def test_how_to_add_a_reward_matches_the_registry() -> None:
    """The doc's steps: a function in rewards/, named in rewards.REWARD_FUNCS, checked by check_reward_funcs."""
    from core.errors import UserError
    from finetune.recipe import check_reward_funcs
    from rewards import REWARD_FUNCS

    section = ARCHITECTURE.split("**A reward**", 1)[1].split("**A recipe**", 1)[0]
    assert "`rewards.REWARD_FUNCS`" in section and "`finetune.recipe.check_reward_funcs`" in section
    assert all(func.__module__.startswith("rewards.") for func in REWARD_FUNCS.values())
    check_reward_funcs(list(REWARD_FUNCS), None)
    with pytest.raises(UserError, match="reward_funcs: unknown reward"):
        check_reward_funcs(["acuracy"], None)


def test_how_to_add_a_recipe_names_every_recipe_type() -> None:
    """Each entry script's dataclasses are the ones the doc lists for its recipe type."""
    import ast

    section = ARCHITECTURE.split("**A recipe**", 1)[1]
    for script in ("grpo.py", "dpo.py", "sft.py"):
        tree = ast.parse((REPO_ROOT / "finetune" / script).read_text(encoding="utf-8"))
        main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
        for arg in main.args.args:
            annotation = ast.unparse(arg.annotation) if arg.annotation else ""
            assert f"`{annotation}`" in section or f"{annotation}`" in section, (script, annotation)
