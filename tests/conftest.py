"""Session-wide fixtures: tiny offline models and small ORIC-format data, built once per test run; and the default
demo's run for its outcome test, started beside the rest of the suite (tests/background_demo.py)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_BENCHMARKS = REPO_ROOT.parent / "shared" / "benchmarks"

# Keep every test offline and quiet.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread in this process too, as in every process the tests start (helpers.entry_env) and in the demo
# beside them (miniature.stages.pin_threads). The background demo keeps both cores busy, and a two-thread torch op
# whose threads wait on each other behind it crawls: a tiny model's build took 250 s on two threads beside two busy
# processes, against 11 s on one (2-core AMD EPYC); the CI suite spent 255 s and 201 s in two such fixtures.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # where torch was loaded before this file


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The demo outcome tests last: they read a run that goes on beside the others (tests/background_demo.py)."""
    from background_demo import MODULE

    items[:] = [item for item in items if item.path.name != MODULE] + [i for i in items if i.path.name == MODULE]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the demo run of the outcome tests, when they are selected, before the first test runs."""
    import background_demo

    if not session.config.option.collectonly and any(i.path.name == background_demo.MODULE for i in session.items):
        background_demo.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    import background_demo

    background_demo.finish()


@pytest.fixture(scope="session")
def tiny_qwen3vl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-initialised Qwen3-VL checkpoint directory."""
    from miniature.tiny.models import build_tiny_model

    return build_tiny_model("qwen3vl", tmp_path_factory.mktemp("tiny-qwen3vl"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen25vl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-initialised Qwen2.5-VL checkpoint directory."""
    from miniature.tiny.models import build_tiny_model

    return build_tiny_model("qwen25vl", tmp_path_factory.mktemp("tiny-qwen25vl"), seed=0)


def write_oric_fixture(root: Path, num_items: int = 8, seed: int = 0) -> tuple[Path, Path]:
    """Write ``num_items`` drawn images and an ORIC training file in the official release layout.

    Returns ``(oric_train.json, image_root)``.
    """
    rng = random.Random(seed)
    image_root = root / "images"
    image_root.mkdir(parents=True, exist_ok=True)
    objects = ["cat", "umbrella", "apple", "dog"]
    records = []
    for index in range(num_items):
        name = f"COCO_train2014_{index:012d}.jpg"
        image = Image.new("RGB", (96, 80), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(image)
        draw.rectangle([10, 10, 50, 40], fill=tuple(rng.randrange(256) for _ in range(3)))
        image.save(image_root / name, quality=90)
        target = objects[index % len(objects)]
        article = "an" if target[0] in "aeiou" else "a"
        records.append(
            {
                "id": index + 1,
                "image": name,
                "target_object": target,
                "problem": f"Is there {article} {target} in the image? Please first provide your reasoning or working "
                "out on how you would go about solving the question between <REASONING> and </REASONING> and then "
                "your final answer between <SOLUTION> and (put yes or no here) </SOLUTION>.",
                "solution": "<SOLUTION>yes</SOLUTION>" if index % 2 == 0 else "<SOLUTION>no</SOLUTION>",
            }
        )
    path = root / "oric_train.json"
    path.write_text(json.dumps(records, indent=2))
    return path, image_root


@pytest.fixture()
def oric_fixture(tmp_path: Path) -> tuple[Path, Path]:
    """A small ORIC-format training file and its image root."""
    return write_oric_fixture(tmp_path / "oric")


@pytest.fixture(autouse=True)
def _restore_environment() -> Iterator[None]:
    """Undo environment variables a test leaves behind: an in-process ``wandb.init`` exports the address of
    its service process, and a training subprocess started by a later test would otherwise attach to it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Undo the root logger's handlers a test leaves behind: an entry script run in-process configures logging
    (``logging.basicConfig(force=True)``) onto the stream pytest captured for that test, which is closed
    afterwards, so a later test's warning would print a logging traceback into its own captured stderr."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
