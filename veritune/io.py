"""Reading user files with one-line errors, and writing outputs atomically (a crash never leaves a
half-written file behind: we write a temporary file beside the target and rename it)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from veritune.errors import UserError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 2) -> Path:
    """Write ``data`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Load a JSON file, raising :class:`UserError` naming the file when it is missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None


def iter_jsonl(path: str | os.PathLike[str], what: str = "file") -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` for each non-blank line; a bad line is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{path}, line {number}: not valid JSON ({err.msg})") from None


def read_json_or_jsonl(path: str | os.PathLike[str], what: str = "file") -> list[Any]:
    """Load a JSON list, or JSON lines (POPE's official files are JSON lines named ``.json``)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    with path.open(encoding="utf-8") as handle:
        head = handle.read(1 << 16).lstrip()
    if head.startswith("["):
        data = read_json(path, what)
        if not isinstance(data, list):
            raise UserError(f"{path}: expected a JSON list")
        return data
    return [record for _, record in iter_jsonl(path, what)]


def read_yaml(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """Load a YAML mapping, raising :class:`UserError` naming the file when it is missing or malformed."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys to values at the top level")
    return data


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, streamed (for manifests)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_table(path: str | os.PathLike[str], what: str = "file") -> list[dict[str, Any]]:
    """Rows of a ``.csv``/``.tsv`` file (header row; a TSV may carry base64 images in its cells) or of a
    JSON list / JSON lines file, as dicts. Missing or undecodable files are one-line errors."""
    import csv
    import sys

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    if path.suffix.lower() not in (".csv", ".tsv"):
        rows = read_json_or_jsonl(path, what)
        bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
        if bad is not None:
            raise UserError(f"{path}: row {bad}: expected a JSON object")
        return rows
    csv.field_size_limit(sys.maxsize)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle, delimiter="\t" if path.suffix.lower() == ".tsv" else ","))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    except csv.Error as err:
        raise UserError(f"{path}: not a valid {path.suffix[1:].upper()} file ({err})") from None


def package_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Versions of Python, veritune and ``packages``, for the provenance in a builder's manifest."""
    import importlib.metadata
    import sys

    versions = {"python": sys.version.split()[0]}
    for package in ("veritune", *packages):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions
