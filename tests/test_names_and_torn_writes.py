"""Names read from a run's folders import no code, and files that are trusted later are never left torn."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from core.errors import UserError
from core.io import atomic_write_bytes
from eval_hooks.registry import registered_benchmark
from eval_hooks.runner import drop_torn_tail
from veritune.cli import main

EVIL_MODULE = """
from pathlib import Path

Path(__file__).with_name("imported.marker").write_text("evilmod ran")


class Bench:
    pass
"""


def test_report_does_not_import_an_eval_folder_named_as_a_dotted_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m veritune.cli report RUN_DIR`` run from a folder holding ``evilmod.py`` (the current directory is
    on ``sys.path`` then): the eval folder ``evilmod.Bench`` is reported by its metrics, never imported."""
    (tmp_path / "evilmod.py").write_text(EVIL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    data = tmp_path / "bench.json"
    data.write_text("[]")
    for step in (0, 1):
        folder = run / "eval" / f"checkpoint-{step}" / "evilmod.Bench"
        folder.mkdir(parents=True)
        record = {"metrics": {"accuracy": 50.0 + step}, "data": {"path": str(data)}}
        (folder / "metrics.json").write_text(json.dumps(record))
        (folder / "predictions.jsonl").write_text(json.dumps({"id": "1", "prediction": "yes"}) + "\n")

    assert main(["report", str(run)]) == 0
    assert not (tmp_path / "imported.marker").exists()
    err = capsys.readouterr().err
    assert "'evilmod.Bench' is not a registered benchmark" in err
    page = (run / "report.html").read_text()
    assert "evilmod.Bench" in page and "is not a registered benchmark" in page


def test_a_registered_only_lookup_refuses_a_dotted_path_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "evilmod.py").write_text(EVIL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match=r"results\.json: 'evilmod\.Bench' is not a registered benchmark"):
        registered_benchmark("evilmod.Bench", "results.json")
    assert not (tmp_path / "imported.marker").exists()
    assert registered_benchmark("pope", "results.json").name == "pope"


def test_drop_torn_tail_keeps_every_prediction_when_killed_while_cutting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "predictions.jsonl"
    kept = "".join(json.dumps({"id": str(i), "prediction": "yes"}) + "\n" for i in range(50))
    path.write_text(kept + '{"id": "50", "predic')
    before = path.read_bytes()
    real_open = io.open

    class Killed:
        """A file opened for writing that is killed after its first bytes."""

        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Killed:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def write(self, data: bytes) -> int:
            self.handle.write(data[:10])
            self.handle.flush()
            raise KeyboardInterrupt  # the kill, mid-write

        def __getattr__(self, name: str) -> Any:
            return getattr(self.handle, name)

    def killed_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        return Killed(handle) if "w" in mode else handle

    monkeypatch.setattr(io, "open", killed_open)
    with pytest.raises(KeyboardInterrupt):
        drop_torn_tail(path)
    monkeypatch.undo()
    assert path.read_bytes() == before  # every prediction still there (and the torn line, cut next time)
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]  # no temporary file left
    drop_torn_tail(path)
    assert path.read_text() == kept


def test_atomic_write_bytes_syncs_the_file_before_renaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "image.png", b"\x89PNG")
    assert synced
    assert (tmp_path / "image.png").read_bytes() == b"\x89PNG"


def test_a_tiny_clip_rebuilt_untrained_drops_the_old_trained_record(tmp_path: Path) -> None:
    """``trained.json`` is what says a CLIP is trained (the demo's tiny-CLIP stage is done by it): new random
    weights in the same folder remove it."""
    out = tmp_path / "clip"
    out.mkdir()
    (out / "trained.json").write_text(json.dumps({"pair_accuracy": 0.9}) + "\n")
    assert main(["tiny-clip", "--out", str(out)]) == 0
    assert not (out / "trained.json").exists()
    assert (out / "config.json").is_file()
