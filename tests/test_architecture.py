"""The layers of docs/ARCHITECTURE.md, enforced: every module imports only from its own package or a layer
below it (imports inside functions included).

    veritune.core → rewards → data_builders | eval_hooks → finetune → top

The top layer is the command line and what only it uses: ``veritune.cli`` and every ``cli.py`` module (the
wiring of a command), ``veritune.demo``, ``veritune.slurm_submit``, ``veritune.launch``, the run report and
the tiny test models (``veritune.tiny``). ``data_builders`` and ``eval_hooks`` share a layer and do not import
each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("veritune", "rewards", "data_builders", "eval_hooks", "finetune")
LAYERS = {"core": 0, "rewards": 1, "data_builders": 2, "eval_hooks": 2, "finetune": 3, "top": 4}


def layer_of(module: str) -> str:
    """The layer (a key of ``LAYERS``) that a first-party module belongs to."""
    parts = module.split(".")
    if parts[-1] == "cli" or module in {"veritune.demo", "veritune.slurm_submit", "veritune.launch", "veritune.report"}:
        return "top"
    if parts[0] == "veritune":
        # The bare package holds only ``__version__``; everything else in it is the core or the top.
        return "core" if len(parts) == 1 or parts[1] == "core" else "top"
    return parts[0]


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


def test_layer_map_knows_the_layers() -> None:
    assert layer_of("veritune.core.io") == "core"
    assert layer_of("veritune") == "core"
    assert layer_of("rewards.graders") == "rewards"
    assert layer_of("eval_hooks.watch") == "eval_hooks"
    assert layer_of("eval_hooks.cli") == "top"
    assert layer_of("data_builders.oric.cli") == "top"
    assert layer_of("finetune.training") == "finetune"
    assert layer_of("veritune.demo") == layer_of("veritune.tiny.models") == "top"


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    path = REPO_ROOT / "finetune" / "training.py"
    assert any(target.startswith("eval_hooks.") for _, target in first_party_imports(path))


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_module_imports_upward(path: Path) -> None:
    wrong = upward_imports(path)
    assert not wrong, "imports against the layers (docs/ARCHITECTURE.md):\n" + "\n".join(wrong)
