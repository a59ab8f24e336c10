"""Read the metrics of an offline W&B run from its ``run-<id>.wandb`` file, for tests.

The file is W&B's 7-byte header followed by a LevelDB-style log (32 KiB blocks; each record chunk has a
7-byte header: CRC32, little-endian length, chunk type) of protobuf ``Record`` messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_WRITTEN = '"stream: all finished"'  # W&B's service logs this once it has closed the run's file
_WAIT_S = 60.0


def _newest_run_file(run_dir: str | Path) -> Path:
    """The newest ``run-*.wandb`` under ``run_dir``, once W&B's service has finished writing it.

    ``run.finish()`` can return before the service (another process) has flushed the last records to the
    file; on a loaded machine a test then read a file without its history. The service's
    ``logs/debug-internal.log`` beside the file says when the stream is closed: wait for that line (at most
    ``_WAIT_S`` seconds; a run without that log is read as it is)."""
    files = sorted(Path(run_dir).rglob("run-*.wandb"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no offline W&B run under {run_dir}")
    log = files[-1].parent / "logs" / "debug-internal.log"
    deadline = time.monotonic() + _WAIT_S
    while log.is_file() and _WRITTEN not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.1)
    return files[-1]


def _chunks(data: bytes) -> Iterator[bytes]:
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        if kind == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk


def offline_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every ``history`` row logged to the newest offline run under ``run_dir`` (a ``wandb`` directory or
    a directory containing one)."""
    return run_file_history(_newest_run_file(run_dir))


def run_file_history(run_file: Path) -> list[dict[str, Any]]:
    """Every ``history`` row of one ``run-<id>.wandb`` file (one that a killed process left: as far as written)."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for chunk in _chunks(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def offline_config(run_dir: str | Path) -> dict[str, Any]:
    """The run config of the newest offline run under ``run_dir``, as last updated."""
    from wandb.proto import wandb_internal_pb2

    config: dict[str, Any] = {}
    for chunk in _chunks(_newest_run_file(run_dir).read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        kind = record.WhichOneof("record_type")
        items = record.config.update if kind == "config" else record.run.config.update if kind == "run" else []
        for item in items:
            config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return config


def logged_tables(rows: list[dict[str, Any]]) -> set[str]:
    """Keys logged as ``wandb.Table`` in ``rows``: the run file stores a table either as one item whose value
    is ``{"_type": "table-file", ...}`` or flattened into ``<key>/_type`` = ``"table-file"`` and siblings."""
    tables = set()
    for row in rows:
        for key, value in row.items():
            if isinstance(value, dict) and value.get("_type") == "table-file":
                tables.add(key)
            elif key.endswith("/_type") and value == "table-file":
                tables.add(key[: -len("/_type")])
    return tables
