"""Shared helpers for tests that run the real entry points in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def entry_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess entry point: offline, quiet, importing this checkout and tests/."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.setdefault("WANDB_MODE", "offline")
    env.setdefault("WANDB_SILENT", "true")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_entry(script: str, *args: str | Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python finetune/<script> args...`` from the repository root."""
    command = [sys.executable, str(REPO_ROOT / "finetune" / script), *map(str, args)]
    return subprocess.run(command, cwd=REPO_ROOT, env=entry_env(**env), capture_output=True, text=True, timeout=timeout)


def log_history(output_dir: Path) -> list[dict[str, Any]]:
    """The trainer's log history, from the newest checkpoint's ``trainer_state.json``."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return json.loads(states[-1].read_text())["log_history"]


def write_finer_fixture(out_dir: Path, num_images: int = 8) -> Path:
    """A small `veritune build finer` dataset directory from the hand-written scene graph of test_finer_builder."""
    from PIL import Image
    from test_finer_builder import GRAPH

    from data_builders.finer.build import build_finer_from_scene_graphs

    images = out_dir.parent / f"{out_dir.name}-images"
    images.mkdir(parents=True)
    for index in range(num_images):
        Image.new("RGB", (48, 48), (index * 30, 60, 90)).save(images / f"{index}.jpg")
    graphs = out_dir.parent / f"{out_dir.name}-graphs.json"
    graphs.write_text(json.dumps([{**GRAPH, "image": f"{i}.jpg"} for i in range(num_images)]))
    build_finer_from_scene_graphs(graphs, images, out_dir)
    return out_dir
