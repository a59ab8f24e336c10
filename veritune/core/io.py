"""Reading user files with one-line errors, and writing outputs atomically (a crash never leaves a
half-written file behind: we write a temporary file beside the target and rename it)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import operator
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from veritune.core.errors import UserError, decode_error_message


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Temporary files are created 0600; outputs get the mode a plain ``open(path, "w")`` would give them, so a
# shared data directory stays readable by whoever the user's umask lets read it.
_FILE_MODE = 0o666 & ~_current_umask()


def _finish_temp(tmp: str, path: Path) -> None:
    os.chmod(tmp, _FILE_MODE)
    os.replace(tmp, path)


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
        _finish_temp(tmp, path)
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
        _finish_temp(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 2) -> Path:
    """Write ``data`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, json_text(data, indent) + "\n")


def json_text(data: Any, indent: int | str | None = 2) -> str:
    """``json.dumps(data, indent=indent, ensure_ascii=False)``, the same text to the byte, faster for records.

    Python's ``json`` writes indented text with its pure-Python encoder (the C one only writes compact text),
    which was most of the time a builder spent writing a large output (issue 31, docs/PERFORMANCE.md). A list
    of records (dicts with the same keys in the same order, each value a string, number, boolean, null, or a
    list of those) is encoded here column by column by the C encoder and laid out with one string template per
    record; any other value is left to ``json.dumps`` itself, so its output and its errors are unchanged.
    """
    if indent is not None and type(data) is list and data:
        text = _json_records(data, indent if isinstance(indent, str) else " " * indent)
        if text is not None:
            return text
    return json.dumps(data, indent=indent, ensure_ascii=False)


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_CUT = "\x00"  # never in the C encoder's output: it escapes every control character inside strings


def _json_records(data: list[Any], step: str) -> str | None:
    """``data`` as ``json.dumps(data, indent=step)`` writes it, when it is a list of records with the same keys
    in the same order whose values are scalars or lists of one length per key of scalars; else None.

    Every scalar ("leaf") of every record is encoded in one call of the C encoder, in record order; the text
    between two leaves depends only on the leaf's place in its record, so it is one cycle of constant pieces.
    """
    if set(map(type, data)) != {dict}:
        return None
    keys = tuple(data[0])
    if not keys or set(map(type, keys)) != {str} or not all(map(keys.__eq__, map(tuple, data))):
        return None
    pad, inner, deeper = "\n" + step, "\n" + 2 * step, "\n" + 3 * step
    pieces: list[str] = []  # pieces[k]: the text before leaf k of a record
    leaves: list[list[Any]] = []  # leaves[k]: leaf k of every record
    text = "{" + inner
    for key in keys:
        column = list(map(operator.itemgetter(key), data))
        text += json.encoder.encode_basestring(key) + ": "
        kinds = set(map(type, column))
        if kinds <= _JSON_SCALARS:
            pieces.append(text)
            leaves.append(column)
            text = "," + inner
            continue
        lengths = set(map(len, column)) if kinds <= {list, tuple} else ()
        if len(lengths) != 1:
            return None
        length = lengths.pop()
        if not length:
            text += "[]," + inner
            continue
        for index in range(length):
            elements = list(map(operator.itemgetter(index), column))
            if not set(map(type, elements)) <= _JSON_SCALARS:
                return None
            pieces.append(text + ("[" if index == 0 else ",") + deeper)
            leaves.append(elements)
            text = ""
        text = inner + "]," + inner
    if not leaves:
        return None
    tail = text[: -len("," + inner)] + pad + "}"
    flat: list[Any] = [None] * (len(data) * len(leaves))
    for position, column in enumerate(leaves):
        flat[position :: len(leaves)] = column
    encoded = json.dumps(flat, ensure_ascii=False, separators=(_CUT, ": "))[1:-1].split(_CUT)
    between = itertools.chain(
        ["[" + pad + pieces[0]], pieces[1:], itertools.cycle([tail + "," + pad + pieces[0], *pieces[1:]])
    )
    return "".join(map(operator.add, between, encoded)) + tail + "\n]"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large structure is built (a COCO-size annotation file
    and its index: millions of containers, none of them garbage), then resume it as it was. Each collection
    the growth triggers walks everything built so far, which made loading a third slower (issue 31)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    except UnicodeDecodeError as err:
        raise UserError(decode_error_message(err, str(path))) from None


def iter_jsonl(
    path: str | os.PathLike[str], what: str = "file", *, skip_invalid: bool = False
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` for each non-blank line; a bad line is an error naming it (with
    ``skip_invalid``, a line that is not JSON, such as one cut short by a crash, is skipped instead)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}, line {number}: " + decode_error_message(err)) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                if skip_invalid:
                    continue
                raise UserError(f"{path}, line {number}: not valid JSON ({err.msg})") from None
            yield number, record


def read_json_or_jsonl(path: str | os.PathLike[str], what: str = "file") -> list[Any]:
    """Load a JSON list, or JSON lines (POPE's official files are JSON lines named ``.json``)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    with path.open("rb") as handle:
        head = handle.read(1 << 16).lstrip()
    if head.startswith(b"["):
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
    except UnicodeDecodeError as err:
        raise UserError(decode_error_message(err, str(path))) from None
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
    except UnicodeDecodeError as err:
        raise UserError(decode_error_message(err, str(path))) from None
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


# ---------------------------------------------------------------------------------------------- build outputs
#
# One policy for every builder's output: each build names its own files (``<out>`` and
# ``<out stem>.manifest.json`` for a file, everything inside ``<out>`` for a directory), records what it is
# (its identity: command, input hashes, settings) before it starts, and an output that holds a different
# build is refused unless ``--force``, which clears it first. The same build again resumes or rewrites
# the same result.

BUILD_RECORD_FILE = ".veritune_build.json"


def build_identity(
    command: str, settings: dict[str, Any], inputs: dict[str, str | os.PathLike[str] | None]
) -> dict[str, Any]:
    """What makes two builds the same build: the command, its output-shaping settings and the contents
    (SHA-256) of its input files; a directory input is named by its resolved path."""
    hashed: dict[str, str | None] = {}
    for name, value in inputs.items():
        if value is None:
            hashed[name] = None
            continue
        path = Path(value)
        hashed[name] = f"sha256:{sha256_file(path)}" if path.is_file() else str(path.resolve())
    plain = {key: (str(value) if isinstance(value, os.PathLike) else value) for key, value in settings.items()}
    return {"command": command, "inputs": hashed, "settings": json.loads(json.dumps(plain, default=str))}


def manifest_path(out: str | os.PathLike[str]) -> Path:
    """Where a file output's manifest goes: ``<out stem>.manifest.json`` beside it (one per build)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.manifest.json")


def _difference(previous: Any, identity: dict[str, Any]) -> str:
    if not isinstance(previous, dict):
        return "not written by a veritune build"
    if previous.get("command") != identity["command"]:
        return f"holds the output of `veritune {previous.get('command')}`"
    changed = [
        key
        for part in ("inputs", "settings")
        for key in sorted(set(previous.get(part) or {}) | set(identity[part]))
        if (previous.get(part) or {}).get(key) != identity[part].get(key)
    ]
    return f"holds a build with other inputs or settings ({', '.join(changed) or 'format'} differ)"


def _check_writable(directory: Path) -> None:
    """Create ``directory`` and check it can be written now, before the build's work (OS errors name it)."""
    import errno

    for part in (directory, *directory.parents):
        if part.exists() and not part.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(part))
        if part.exists():
            break
    directory.mkdir(parents=True, exist_ok=True)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "Permission denied", str(directory))


def _refuse(out: Path, reason: str) -> UserError:
    return UserError(f"--out {out}: {reason}; choose another --out, or add --force to clear it and build anew")


def claim_output_file(
    out: str | os.PathLike[str],
    identity: dict[str, Any],
    *,
    force: bool,
    companions: tuple[str, ...] = (".manifest.json",),
) -> Path:
    """Make ``out`` (a file output) ready for the build ``identity``; returns its manifest path.

    ``companions`` are the suffixes (after ``<out stem>``) of the other files the build writes beside it.
    An existing output of another build, or a file veritune did not build, is refused unless ``force``,
    which removes it and its companions first.

    Raises:
        UserError: ``out`` is a directory, or holds a different build and ``force`` is not set.
    """
    out = Path(out)
    if out.is_dir():
        raise UserError(
            f"--out {out}: is a directory; give a file path (e.g. {out / ('output' + (out.suffix or '.json'))})"
        )
    manifest = manifest_path(out)
    owned = [out, *(out.with_name(out.stem + suffix) for suffix in companions)]
    previous = None
    if manifest.is_file():
        try:
            previous = json.loads(manifest.read_text(encoding="utf-8")).get("build")
        except (ValueError, UnicodeDecodeError, AttributeError):
            previous = None
    # A claim left by a build that stopped before writing anything holds nothing to protect.
    if any(path.exists() for path in owned if path != manifest) or (manifest.exists() and previous is None):
        if previous != identity:
            if not force:
                raise _refuse(out, _difference(previous, identity))
            for path in owned:
                path.unlink(missing_ok=True)
            previous = None
    _check_writable(out.parent)
    if previous != identity:  # claim it: an interrupted build of the same identity resumes from its companions
        atomic_write_json(manifest, {"build": identity, "status": "in progress"})
    return manifest


def claim_output_dir(out_dir: str | os.PathLike[str], identity: dict[str, Any], *, force: bool) -> bool:
    """Make ``out_dir`` (a directory output) ready for the build ``identity``; True when it already holds
    this build (the build resumes there).

    Raises:
        UserError: ``out_dir`` is a file, or holds something else and ``force`` is not set.
    """
    import shutil

    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: is a file, but this build writes a directory; give a directory path")
    record = out_dir / BUILD_RECORD_FILE
    resuming = False
    if out_dir.is_dir() and any(child.name != BUILD_RECORD_FILE for child in out_dir.iterdir()):
        previous = None
        if record.is_file():
            try:
                previous = json.loads(record.read_text(encoding="utf-8")).get("build")
            except (ValueError, UnicodeDecodeError, AttributeError):
                previous = None
        if previous == identity:
            resuming = True
        elif not force:
            raise _refuse(out_dir, _difference(previous, identity))
        else:
            for child in out_dir.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    _check_writable(out_dir)
    atomic_write_json(record, {"build": identity})
    return resuming
