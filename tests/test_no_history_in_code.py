"""Code in the present tense, and a lab notebook that can be read.

The comments and docstrings of the code (every ``.py`` outside ``tests/`` and ``docs/``) and the comments of the
recipes, Slurm and shell scripts say what is true now and why: they name no experiment round, no candidate setting
(F20, V8), no date and no measured time, and they cite the lab notebook by a short anchor
(``docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base``), never by a section's title. The history lives in the notebook:
it opens with an index of its dated entries, no heading of ``docs/`` is longer than 80 characters, and every
anchor the repository cites exists.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
NOTEBOOK = DOCS / "LAB_NOTEBOOK.md"
ARCHIVE = DOCS / "LAB_NOTEBOOK_ARCHIVE.md"

# The folders of code, recipes and scripts; a new top-level folder of Python files must be added here
CODE_DIRS = (
    "core",
    "data_builders",
    "eval_hooks",
    "finetune",
    "miniature",
    "perf",
    "recipes",
    "rewards",
    "scripts",
    "slurm",
    "veritune",
)
NOT_CODE = {"tests", "docs", "outputs", "logs", "data"}
SUFFIXES = {".py", ".yaml", ".yml", ".sh", ".sbatch"}

MONTHS = "January|February|March|April|June|July|August|September|October|November|December"
HISTORY = {
    # "DPO round 16", "base round 9", "rounds 12 and 13", "round N"; FINER's generation Rounds 1-3 are protocol
    "an experiment round": r"\b(?:DPO|GRPO|SFT|[Bb]ase|[Ss]election) rounds? \d+|\b[Rr]ounds? (?:[1-9]\d+|N)\b",
    "an experiment pass": r"(?i)\b(?:second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) pass\b",
    # the notebook's candidate settings (F14, V8, E5, W0); F1 is the metric
    "a candidate's name": r"\b(?:F(?:[02-9]|[1-9]\d)|[VEGWDM]\d{1,2})\b",
    # a model id's date (gpt-5-2025-08-07) is part of its name, not a date of ours
    "a date": rf"(?<![\w-])20\d\d-[01]\d-[0-3]\d(?![\w-])|\b(?:{MONTHS})\b|\bMay \d",
    "a measured time": r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:ms|s|seconds?|min|minutes?|hours?)\b(?![-\w])"
    r"|\b\d+(?:\.\d+)? ?(?:x|×|times) (?:faster|slower|cheaper)\b|\btook\b|\bmeasured (?:on|at) \d",
    "a measurement still to come": r"\bno (?:\w+ )?measurement has\b|\bnot (?:yet )?been measured\b",
    # a title quoted after the file's name, or on the next line after "LAB_NOTEBOOK.md,"
    "a notebook section cited by its title": r"LAB_NOTEBOOK(?:_ARCHIVE)?\.md(?!#)[^\"“\n]{0,30}[\"“][A-Z]"
    r"|LAB_NOTEBOOK(?:_ARCHIVE)?\.md,\s*$|\bnotebook[,:] *[\"“]",
}
PATTERNS = {name: re.compile(pattern) for name, pattern in HISTORY.items()}
TITLE_CITATION = PATTERNS["a notebook section cited by its title"]

# Times that are settings, not measurements: (file, text on the line, why)
ALLOWED = (
    ("core/progress.py", "0.1 s on a terminal", "tqdm's mininterval, a setting"),
    ("recipes/qwen3vl_oric_vllm_server.yaml", "TRL's default is 240 s", "a default's value"),
    ("perf/device_check_rollout.sh", "mark 320 s", "the script's own deadlines"),
    ("perf/device_check_rollout.sh", "mark 530 s", "the script's own deadlines"),
    ("perf/device_check_rollout.sh", "at $1 s after the start", "the script's own deadlines"),
)


def code_files() -> list[Path]:
    files = []
    for folder in CODE_DIRS:
        files += [p for p in sorted((REPO_ROOT / folder).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if "__pycache__" not in p.parts]


def python_prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment and docstring line of a Python source."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    prose = [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    for offset, line in enumerate(first.value.value.splitlines()):
                        prose.append((first.lineno + offset, line))
    return prose


def comment_prose(text: str) -> list[tuple[int, str]]:
    """(line number, comment) of a YAML or shell file: what follows a ``#`` that starts a comment."""
    prose = []
    for number, line in enumerate(text.splitlines(), 1):
        match = re.search(r"(?:^|\s)#(?!!)(.*)", line)
        if match:
            prose.append((number, match.group(1)))
    return prose


def prose_of(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return python_prose(text) if path.suffix == ".py" else comment_prose(text)


def allowed(relative: str, line: str) -> bool:
    return any(relative == file and text in line for file, text, _ in ALLOWED)


def test_every_folder_of_code_is_scanned() -> None:
    tops = [p for p in REPO_ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in NOT_CODE]
    with_code = {p.name for p in tops if next(p.rglob("*.py"), None) or next(p.rglob("*.yaml"), None)}
    assert with_code <= set(CODE_DIRS), f"add to CODE_DIRS: {sorted(with_code - set(CODE_DIRS))}"


def test_code_and_recipes_name_no_round_candidate_date_or_measured_time() -> None:
    found = []
    for path in code_files():
        relative = path.relative_to(REPO_ROOT).as_posix()
        for number, line in prose_of(path):
            for name, pattern in PATTERNS.items():
                match = pattern.search(line)
                if match and not allowed(relative, line):
                    found.append(f"{relative}:{number}: {name} ({match.group(0)!r}): {line.strip()}")
    assert not found, "history in code (it belongs in docs/LAB_NOTEBOOK.md):\n" + "\n".join(found)


def test_tests_cite_no_notebook_section_by_its_title() -> None:
    found = []
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        for number, line in python_prose(path.read_text(encoding="utf-8")):
            if TITLE_CITATION.search(line):
                found.append(f"{path.relative_to(REPO_ROOT).as_posix()}:{number}: {line.strip()}")
    assert not found, "cite the notebook by anchor (LAB_NOTEBOOK.md#<anchor>):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("# the steps DPO round 15 chose", "an experiment round"),
        ("# as base round 9 showed", "an experiment round"),
        ("# F20's 6,400 steps", "a candidate's name"),
        ("# V4 against V2", "a candidate's name"),
        ("# measured on 2026-11-28", "a date"),
        ("# in November", "a date"),
        ("# about 26 minutes from nothing", "a measured time"),
        ("# 3.1 s a step", "a measured time"),
        ("# it took longer", "a measured time"),
        ("# ~8x slower on a CPU", "a measured time"),
        ("# no device measurement has shown it faster yet", "a measurement still to come"),
        ('# (docs/LAB_NOTEBOOK.md, "Sixteen vision tokens")', "a notebook section cited by its title"),
    ],
)
def test_the_patterns_catch_history(line: str, name: str) -> None:
    assert PATTERNS[name].search(line)


@pytest.mark.parametrize(
    "line",
    [
        '"""Round 1: the positives (Figs. 16-18) and the WH sentence of each caption."""',  # FINER's LLM rounds
        "# F1 from the rounded values; macro-F1 over the two classes",
        "max_pixels: 1003520  # 1280 x 28 x 28, Qwen-VL's budget",
        "# 1280 * 28 * 28 pixels at most",
        "# rounding to one decimal, as inference.py prints it",
        "# one rollout round per step: 8 generations per prompt",
        'model="gpt-5-2025-08-07"  # the judge of the paper',
        "# ORIC Table 9: lr 1e-6, 8 generations, temperature 1",
        "# FINER-Tuning's beta (Table 10), bf16 and fp16 off",
        "# see docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base",
        "# levels L3-L7 of FINER's probe; Qwen2.5-VL-7B",
    ],
)
def test_the_patterns_leave_protocol_alone(line: str) -> None:
    hits = [name for name, pattern in PATTERNS.items() if pattern.search(line)]
    assert not hits, hits


# ---- the notebook and docs


def headings(text: str) -> list[tuple[int, str]]:
    """(line number, heading) of a Markdown text, fenced code blocks skipped."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append((number, line))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return set(re.findall(r'<a id="([\w-]+)"></a>', text)) | {slug(h) for _, h in headings(text)}


def test_no_heading_of_the_docs_exceeds_80_characters() -> None:
    long = [
        f"{path.relative_to(REPO_ROOT).as_posix()}:{number}: {len(line)} characters"
        for path in sorted(DOCS.rglob("*.md"))
        for number, line in headings(path.read_text(encoding="utf-8"))
        if len(line) > 80
    ]
    assert not long, "\n".join(long)


def test_the_notebook_opens_with_an_index_of_its_dated_entries() -> None:
    for path in (NOTEBOOK, ARCHIVE):
        text = path.read_text(encoding="utf-8")
        sections = [line for _, line in headings(text) if line.startswith("## ")]
        assert sections[0] == "## Index", f"{path.name}: its first section is {sections[0]!r}"
        index = text[text.index("## Index") :].split("\n## ", 1)[0]
        entries = re.findall(r'<a id="([\w-]+)"></a>\n## (.+)', text)
        assert entries, path.name
        for anchor, heading in entries:
            assert re.match(r"20\d\d-\d\d-\d\d ", heading), f"{path.name}: an entry without its date: {heading}"
            assert f"#{anchor})" in index or f"({path.name}#{anchor})" in index, f"{path.name}: {anchor} not indexed"
        # every entry sits under its anchor, so the index and the citations outlive a heading's rewording
        assert len(entries) == len(sections) - 1, f"{path.name}: a section without an anchor"


def test_every_cited_notebook_anchor_exists() -> None:
    targets = {"LAB_NOTEBOOK.md": anchors(NOTEBOOK), "LAB_NOTEBOOK_ARCHIVE.md": anchors(ARCHIVE)}
    files = [*code_files(), *sorted((REPO_ROOT / "tests").rglob("*.py")), *sorted(DOCS.rglob("*.md"))]
    files.append(REPO_ROOT / "README.md")
    broken = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), 1):
            for name, anchor in re.findall(r"(LAB_NOTEBOOK(?:_ARCHIVE)?\.md)#([\w-]+)", line):
                if anchor not in targets[name]:
                    broken.append(f"{path.relative_to(REPO_ROOT).as_posix()}:{number}: {name}#{anchor}")
            if path in (NOTEBOOK, ARCHIVE):
                for anchor in re.findall(r"\]\(#([\w-]+)\)", line):
                    if anchor not in targets[path.name]:
                        broken.append(f"{path.relative_to(REPO_ROOT).as_posix()}:{number}: #{anchor}")
    assert not broken, "links to no notebook anchor:\n" + "\n".join(broken)
