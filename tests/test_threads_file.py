"""A training run takes more torch threads once the file ``VERITUNE_THREADS_FILE`` names appears (finetune.threads):
how the demo hands the FINER half the core the ORIC half leaves (miniature.stages.SpareCore)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from finetune.threads import THREADS_FILE_ENV, ThreadsFromFile, read_thread_count, threads_callback
from miniature.stages import SPARE_THREADS, SpareCore


@pytest.fixture()
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_count_is_taken_once_when_the_file_appears(
    tmp_path: Path, restore_threads: None, caplog: pytest.LogCaptureFixture
) -> None:
    torch.set_num_threads(1)
    callback = ThreadsFromFile(tmp_path / "spare-threads")
    callback.on_step_begin(None, None, None)
    assert torch.get_num_threads() == 1 and callback.applied is None  # no file yet: nothing changes
    (tmp_path / "spare-threads").write_text("")  # being written
    callback.on_step_begin(None, None, None)
    assert torch.get_num_threads() == 1
    (tmp_path / "spare-threads").write_text("2\n")
    with caplog.at_level(logging.INFO, logger="veritune.train"):
        callback.on_step_begin(None, None, None)
    assert torch.get_num_threads() == 2 and callback.applied == 2
    assert "torch threads: 1 -> 2" in caplog.text
    torch.set_num_threads(1)
    callback.on_step_begin(None, None, None)  # once: a later change of the file or of the count is not undone
    assert torch.get_num_threads() == 1


def test_only_a_positive_count_counts(tmp_path: Path) -> None:
    for text, expected in (("3", 3), ("0", None), ("-1", None), ("two", None)):
        (tmp_path / "n").write_text(text)
        assert read_thread_count(tmp_path / "n") == expected
    assert read_thread_count(tmp_path / "missing") is None


def test_every_entry_script_gets_the_callback_when_the_environment_names_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from finetune.configs import ScriptArguments
    from finetune.training import get_callbacks

    monkeypatch.delenv(THREADS_FILE_ENV, raising=False)
    assert threads_callback() is None
    monkeypatch.setenv(THREADS_FILE_ENV, str(tmp_path / "spare-threads"))
    callbacks = get_callbacks(ScriptArguments(), SimpleNamespace(report_to=["none"]))  # type: ignore[arg-type]
    found = [callback for callback in callbacks if isinstance(callback, ThreadsFromFile)]
    assert len(found) == 1 and found[0].path == tmp_path / "spare-threads"


def test_the_demo_writes_the_file_when_the_core_is_released(tmp_path: Path) -> None:
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "spare-threads").write_text("2\n")  # an earlier demo's
    spare = SpareCore(tmp_path)
    assert not spare.file.exists() and spare.threads() is None
    spare.release()
    assert read_thread_count(spare.file) == SPARE_THREADS == spare.threads()
    assert os.environ.get(THREADS_FILE_ENV) is None  # the demo's own process is not changed
