"""Reading user files with one-line errors, and writing outputs atomically (a crash never leaves a
half-written file behind: we write a temporary file beside the target and rename it)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import math
import operator
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from core.errors import UserError, decode_error_message
from core.lock import hold_lock
from core.ownership import check_not_protected


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


def atomic_write_text(path: str | os.PathLike[str], text: str | Iterable[str], *, hashed: bool = False) -> Path:
    """Write ``text`` (or its consecutive pieces) to ``path`` through a temporary file and an atomic rename.

    ``hashed``: also hash the bytes written, so that a manifest's :func:`sha256_file` of the file does not read
    it back (a builder's questions file: tens of MB).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pieces = (text,) if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hashed:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as binary:
                for piece in pieces:
                    data = piece.encode("utf-8")
                    digest.update(data)
                    binary.write(data)
                binary.flush()
                os.fsync(binary.fileno())
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                for piece in pieces:
                    handle.write(piece)
                handle.flush()
                os.fsync(handle.fileno())
        _finish_temp(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if hashed:
        _KNOWN_DIGESTS[_file_identity(path)] = digest.hexdigest()
    return path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, synced to disk, and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _finish_temp(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 2, *, hashed: bool = False) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (``hashed``: as :func:`atomic_write_text`)."""
    return atomic_write_text(path, itertools.chain(json_chunks(data, indent), ("\n",)), hashed=hashed)


def json_text(data: Any, indent: int | str | None = 2) -> str:
    """``json.dumps(data, indent=indent, ensure_ascii=False)``, the same text to the byte, faster for records.

    Python's ``json`` writes indented text with its pure-Python encoder (the C one only writes compact text),
    which was most of the time a builder spent writing a large output (docs/PERFORMANCE.md, oric_builder). A list
    of records (dicts with the same keys in the same order, each value a string, number, boolean, null, or a
    list of those) is encoded here column by column by the C encoder and laid out with one string template per
    record; any other value is left to ``json.dumps`` itself, so its output and its errors are unchanged.
    """
    return "".join(json_chunks(data, indent))


def json_chunks(data: Any, indent: int | str | None = 2, records_per_chunk: int = 2048) -> Iterator[str]:
    """:func:`json_text`'s text in consecutive pieces (a few MB each for a large list of records), for a writer
    that hashes and writes them as they come instead of holding the whole text and its bytes at once."""
    if indent is not None and type(data) is list and data:
        step = indent if isinstance(indent, str) else " " * indent
        layout = _json_records(data, step)
        if layout is not None:
            return _record_chunks(*layout, "\n" + step, records_per_chunk)
    return iter((json.dumps(data, indent=indent, ensure_ascii=False),))


def _record_chunks(template: str, values: list[list[Any]], pad: str, size: int) -> Iterator[str]:
    texts = map(template.__mod__, zip(*values))
    separator, before = "," + pad, "[" + pad
    while chunk := list(itertools.islice(texts, size)):
        yield before
        yield separator.join(chunk)
        before = separator
    yield "\n]"


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_CUT = "\x00"  # never in the C encoder's output: it escapes every control character inside strings


def _json_records(data: list[Any], step: str) -> tuple[str, list[list[Any]]] | None:
    """How ``json.dumps(data, indent=step)`` writes ``data``, when it is a list of records with the same keys
    in the same order whose values are scalars or lists of one length per key of scalars: a record's text as a
    ``%`` template and the arguments of each record, by column; else None.

    The values of each key ("column") are encoded together by the C encoder, or once per distinct value where a
    column repeats a few (a class name, the question texts shared by every record about a class); the text
    around them is the same in every record, so each record is one ``%`` of one template.
    """
    if set(map(type, data)) != {dict}:
        return None
    keys = tuple(data[0])
    if not keys or set(map(type, keys)) != {str} or not all(map(keys.__eq__, map(tuple, data))):
        return None
    pad, inner, deeper = "\n" + step, "\n" + 2 * step, "\n" + 3 * step
    template = "{" + inner  # the text of a record, "%s" where an encoded value goes
    values: list[list[str]] = []  # values[k]: the k-th encoded value of every record
    rows = list(map(tuple, map(dict.values, data)))  # one pass over the records (same keys, same order)
    for position, key in enumerate(keys):
        column = list(map(operator.itemgetter(position), rows))
        template += json.encoder.encode_basestring(key).replace("%", "%%") + ": "
        kinds = set(map(type, column))
        if kinds <= _JSON_SCALARS:
            template += _json_column(column, kinds, values) + "," + inner
            continue
        lengths = set(map(len, column)) if kinds <= {list, tuple} else ()
        if len(lengths) != 1:
            return None
        length = lengths.pop()
        if not length:
            template += "[]," + inner
            continue
        shared = dict(zip(map(id, column), column))  # the same list object in many records: encoded once
        if len(shared) * 8 <= len(column):
            encoded = {}
            for ident, elements in shared.items():
                if not set(map(type, elements)) <= _JSON_SCALARS:
                    return None
                text = json.dumps(list(elements), ensure_ascii=False, separators=(_CUT, ": "))[1:-1]
                encoded[ident] = "[" + deeper + ("," + deeper).join(text.split(_CUT)) + inner + "]"
            values.append(list(map(encoded.__getitem__, map(id, column))))
            template += "%s," + inner
            continue
        for index in range(length):
            elements = list(map(operator.itemgetter(index), column))
            kinds = set(map(type, elements))
            if not kinds <= _JSON_SCALARS:
                return None
            template += ("[" if index == 0 else ",") + deeper + _json_column(elements, kinds, values)
        template += inner + "]," + inner
    template = template[: -len("," + inner)] + pad + "}"
    if not values:
        return None
    return template, values


def _json_column(column: list[Any], kinds: set[type], values: list[list[Any]]) -> str:
    """The template text of a column of scalars (of the types ``kinds``) as ``json.dumps`` writes them: a
    ``%`` conversion that writes each value as JSON (``%d`` an int, ``%r`` a finite float), its argument
    appended to ``values``, or ``null`` for a column of None."""
    if kinds == {type(None)}:
        return "null"
    if kinds == {int} or (kinds == {float} and all(map(math.isfinite, column))):
        values.append(column)  # the C encoder writes int.__repr__ and float.__repr__: so do %d and %r
        return "%d" if kinds == {int} else "%r"
    if kinds == {str}:
        distinct = dict.fromkeys(column)
        if len(distinct) * 8 <= len(column):  # a few values, repeated: each encoded once
            texts = json.dumps(list(distinct), ensure_ascii=False, separators=(_CUT, ": "))[1:-1].split(_CUT)
            values.append(list(map(dict(zip(distinct, texts)).__getitem__, column)))
            return "%s"
    values.append(json.dumps(column, ensure_ascii=False, separators=(_CUT, ": "))[1:-1].split(_CUT))
    return "%s"


@contextlib.contextmanager
def gc_paused(*, keep: bool = False) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large structure is built (a COCO-size annotation file
    and its index: millions of containers, none of them garbage), then resume it as it was. Each collection
    the growth triggers walks everything built so far, which made loading a third slower
    (docs/PERFORMANCE.md, oric_builder).

    ``keep``: what was built stays for the rest of the run (a builder's loaded annotations), so it is moved
    out of the collector's sight (``gc.freeze``) instead of being walked by the next collections, which would
    otherwise pay the paused work back, a full walk per generation. Freezing is safe for data without
    reference cycles (such data is still freed, by reference counting, once dropped); everything is collected
    first (a walk of what exists before the load, not of what it builds) so that no cyclic garbage of the
    caller's is frozen with it, and whoever owns the run ends it with ``gc.unfreeze()`` (``build_oric_file``
    does), so that nothing frozen outlives it.
    """
    enabled = gc.isenabled()
    if keep:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        if enabled:
            gc.enable()


def read_json(path: str | os.PathLike[str], what: str = "file", *, hashed: bool = False) -> Any:
    """Load a JSON file, raising :class:`UserError` naming the file when it is missing or malformed.

    ``hashed``: also hash the bytes read, so that a manifest's :func:`sha256_file` of the same, unchanged file
    does not read and hash it again.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    try:
        if not hashed:
            with path.open(encoding="utf-8") as handle:
                return json.load(handle)
        identity = _file_identity(path)
        raw = path.read_bytes()
        _KNOWN_DIGESTS[identity] = hashlib.sha256(raw).hexdigest()
        text = raw.decode("utf-8")
        del raw  # before the parse, the peak of a large file's load
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    except UnicodeDecodeError as err:
        raise UserError(decode_error_message(err, str(path))) from None


# sha256 of files hashed as they were read (read_json(..., hashed=True)), by the file's identity: a file
# rewritten since has another size, modification time or inode, and is hashed afresh.
_KNOWN_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def _file_identity(path: Path) -> tuple[str, int, int, int, int]:
    stat = path.stat()
    return (os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


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
    """Hex SHA-256 of a file, streamed (for manifests); a file hashed as it was read and unchanged since
    (:func:`read_json` with ``hashed``) is not read again."""
    known = _KNOWN_DIGESTS.get(_file_identity(Path(path)))
    if known is not None:
        return known
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
# ``<out stem>.manifest.json`` for a file, everything inside ``<out>`` for a directory) and records what it is
# (its identity: command, input hashes, settings). An output that holds a different build is refused unless
# ``--force``. Builders check their inputs first, then claim the output (:func:`claim_output_file`,
# :func:`claim_output_dir`), then build *beside* it, in a staging folder in the same directory, and only a
# finished build replaces the output (:meth:`StagedOutput.commit`): a build that fails, or is killed, leaves
# the previous build and its manifest exactly as they were. The same build again rebuilds the same result
# (an interrupted one resumes from what its staging folder kept).

BUILD_RECORD_FILE = ".veritune_build.json"
STAGING_SUFFIX = ".veritune-staging"  # .<out name>.veritune-staging: where a build is written before it replaces <out>
_STAGING_RECORD = ".veritune_staging.json"  # inside the staging folder: the identity of the build it holds
_COMMIT_JOURNAL = ".veritune_commit.json"  # inside a file output's staging folder: the moves under way
_OLD_SUFFIX = ".veritune-old"  # a directory output being replaced, on systems without an atomic exchange


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


def dataset_manifest(dataset_path: str | os.PathLike[str] | None) -> Path | None:
    """The manifest a veritune builder wrote for a dataset, when there is one: ``manifest.json`` inside a
    directory build; beside a file, its own ``<stem>.manifest.json`` (:func:`manifest_path`), else the
    ``manifest.json`` of the directory build it belongs to. The one lookup of the model card and
    ``veritune_run.json``."""
    if not dataset_path:
        return None
    dataset = Path(dataset_path)
    candidates = (
        [dataset / "manifest.json"] if dataset.is_dir() else [manifest_path(dataset), dataset.parent / "manifest.json"]
    )
    return next((manifest for manifest in candidates if manifest.is_file()), None)


def staging_path(out: str | os.PathLike[str]) -> Path:
    """The folder a build of ``out`` is written to before it replaces ``out``: ``.<out name>.veritune-staging``
    beside it (same file system, so the replacement is a rename)."""
    out = Path(out)
    return out.with_name(f".{out.name}{STAGING_SUFFIX}")


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


def require_input_path(key: str, path: str | os.PathLike[str], kind: str = "any") -> None:
    """Check, before anything loads, that an input a key names exists as ``kind`` expects: ``"file"``, ``"dir"``,
    or ``"any"`` (a reader that takes a file or a folder).

    Raises:
        UserError: ``"<key>: <path>: no such file"`` (``no such directory``; for ``any``, ``no such file`` when the
            name has a suffix, else ``no such file or directory``), or ``"<key>: <path>: a file, not a directory"``
            and the reverse.
    """
    if kind not in ("file", "dir", "any"):
        raise ValueError(f"kind: expected file, dir or any, got {kind!r}")
    path = Path(path)
    if not path.exists():
        what = {"file": "file", "dir": "directory"}.get(kind) or ("file" if path.suffix else "file or directory")
        raise UserError(f"{key}: {path}: no such {what}")
    if kind == "dir" and not path.is_dir():
        raise UserError(f"{key}: {path}: a file, not a directory")
    if kind == "file" and path.is_dir():
        raise UserError(f"{key}: {path}: a directory, not a file")


def check_output_path(out: str | os.PathLike[str], *, directory: bool = False) -> None:
    """Check ``--out`` as a flag, before the inputs are read: the right kind of path (a file, or a directory
    when ``directory``) under folders that exist or can be made and written. Creates nothing.

    Raises:
        UserError: ``out`` is a directory where a file goes, or the reverse.
        OSError: a part of the path is a file, or the folder cannot be written (named by the CLI's error line).
    """
    import errno

    out = Path(out)
    if directory and out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file, but this build writes a directory; give a directory path")
    if not directory and out.is_dir():
        raise UserError(
            f"--out {out}: is a directory; give a file path (e.g. {out / ('output' + (out.suffix or '.json'))})"
        )
    for part in out.parents:
        if part.exists():
            if not part.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(part))
            if not os.access(part, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "Permission denied", str(part))
            return
        if os.path.lexists(part):  # a dangling link
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(part))


def _refuse(out: Path, reason: str) -> UserError:
    return UserError(f"--out {out}: {reason}; choose another --out, or add --force to clear it and build anew")


def _read_record(path: Path) -> tuple[bool, Any]:
    """``(exists, build identity or None)`` of a manifest or build record (unreadable: no identity)."""
    if not path.is_file():
        return path.exists(), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        return True, None
    return True, data.get("build") if isinstance(data, dict) else None


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two directories in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    import errno

    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def recover_output(out: str | os.PathLike[str]) -> None:
    """Finish a replacement of ``out`` that a killed build left half done (every claim does this first)."""
    _recover(Path(out))


def _recover(out: Path) -> None:
    """Finish a replacement of ``out`` that a killed build left half done (its moves are journaled, so the new
    build is rolled forward); a staging folder without a finished build is left for :func:`_open_staging`."""
    staging = staging_path(out)
    journal = staging / _COMMIT_JOURNAL
    if journal.is_file():  # a file output's commit: every staged file was complete before the journal was written
        try:
            plan = json.loads(journal.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            plan = None
        if isinstance(plan, dict):
            for name in plan.get("move", []):
                if (staging / name).exists():
                    os.replace(staging / name, out.parent / name)
            for name in plan.get("remove", []):
                (out.parent / name).unlink(missing_ok=True)
            _fsync_dir(out.parent)
        _remove(staging)
    old = out.with_name(f".{out.name}{_OLD_SUFFIX}")
    if old.exists():  # a directory output's two-rename replacement
        if not out.exists():
            os.replace(staging if staging.is_dir() else old, out)
        _remove(old)


def _open_staging(out: Path, identity: dict[str, Any], seed: tuple[Path, ...] = ()) -> tuple[Path, bool]:
    """The staging folder for a build ``identity`` of ``out``: kept when it holds an interrupted build of the
    same identity (returns True: the build resumes), else emptied and seeded with copies of ``seed``."""
    import shutil

    staging = staging_path(out)
    _, held = _read_record(staging / _STAGING_RECORD)
    if staging.is_dir() and held == identity:
        return staging, True
    _remove(staging)
    staging.mkdir()
    for path in seed:
        if path.is_file():
            shutil.copy2(path, staging / path.name)
    atomic_write_json(staging / _STAGING_RECORD, {"build": identity, "target": out.name})
    return staging, False


class StagedOutput:
    """A claimed output: the build writes to :attr:`path` (inside the staging folder), then :meth:`commit`
    replaces the output with it. As a context manager it commits when the block succeeds and discards the
    staging folder when the block raises an ``Exception`` (an interrupt keeps it, so the same build resumes).

    Attributes:
        target: the output the user named (``--out``).
        path: where the builder writes its output (same file name as ``target``).
        resuming: ``target`` (or the staging folder) already holds this same build.
    """

    def __init__(
        self,
        target: Path,
        path: Path,
        kind: str,
        identity: dict[str, Any],
        resuming: bool,
        owned: tuple[str, ...] = (),
    ) -> None:
        self.target = target
        self.owned = owned  # a file output's own file names (its companions), removed when the new build has none
        self.path = path
        self.kind = kind
        self.identity = identity
        self.resuming = resuming
        self.committed = False

    @property
    def staging(self) -> Path:
        """The staging folder (for a directory output, the new directory itself)."""
        return staging_path(self.target)

    def staged(self, target_path: str | os.PathLike[str]) -> Path:
        """Where the build writes what will become ``target_path`` (a path under or beside the output)."""
        target_path = Path(target_path)
        if self.kind == "dir":
            return self.path / target_path.relative_to(self.target)
        return self.staging / target_path.relative_to(self.target.parent)

    def published(self, staged_path: str | os.PathLike[str]) -> Path:
        """Where ``staged_path`` (a path the build wrote) lies once committed."""
        staged_path = Path(staged_path)
        if self.kind == "dir":
            return self.target / staged_path.relative_to(self.path)
        return self.target.parent / staged_path.relative_to(self.staging)

    def commit(self) -> Path:
        """Replace the output with the staged build; returns the output's path. A file output's files are moved
        in, its manifest last, under a journal (a kill in between is rolled forward by the next claim); a
        directory output is swapped in one atomic exchange where the system has one."""
        if self.committed:
            return self.target
        if self.kind == "dir":
            self._commit_dir()
        else:
            self._commit_file()
        self.committed = True
        return self.target

    def discard(self) -> None:
        """Remove the staging folder; the output stays as it was."""
        if not self.committed:
            _remove(self.staging)

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if kind is None:
            self.commit()
        elif issubclass(kind, Exception):
            self.discard()

    def _commit_file(self) -> None:
        staging, out = self.staging, self.target
        if not self.path.is_file():
            raise RuntimeError(f"the build wrote no {self.path}")
        manifest = staging / manifest_path(out).name
        if not manifest.is_file():  # a builder without a manifest of its own: the build's identity is the manifest
            atomic_write_json(
                manifest, {"output": out.name, "output_sha256": sha256_file(self.path), "build": self.identity}
            )
        names = sorted(p.name for p in staging.iterdir() if p.name not in (_STAGING_RECORD, _COMMIT_JOURNAL))
        moves = [name for name in names if name not in (out.name, manifest.name)] + [out.name, manifest.name]
        removes = [name for name in self.owned if name not in moves]
        (staging / _STAGING_RECORD).unlink(missing_ok=True)
        atomic_write_json(staging / _COMMIT_JOURNAL, {"move": moves, "remove": removes})
        _fsync_dir(staging)
        _recover(out)

    def _commit_dir(self) -> None:
        staging, out = self.path, self.target
        atomic_write_json(staging / BUILD_RECORD_FILE, {"build": self.identity})
        (staging / _STAGING_RECORD).unlink(missing_ok=True)
        if out.is_dir() and any(out.iterdir()):
            if _exchange(staging, out):
                _remove(staging)  # now the previous build
            else:
                old = out.with_name(f".{out.name}{_OLD_SUFFIX}")
                os.replace(out, old)
                os.replace(staging, out)
                _remove(old)
        else:
            if out.is_dir():
                out.rmdir()
            os.replace(staging, out)
        _fsync_dir(out.parent)


def hold_output_lock(out: str | os.PathLike[str], flag: str = "--out") -> None:
    """Hold ``out``'s lock until the command ends (:func:`core.lock.hold_lock`): a second build into it meanwhile
    is refused in one line naming this one."""
    hold_lock(out, f"{flag} {out}", f"wait for it to finish, or choose another {flag}")


def claim_output_file(
    out: str | os.PathLike[str],
    identity: dict[str, Any],
    *,
    force: bool,
    companions: tuple[str, ...] = (".manifest.json",),
) -> StagedOutput:
    """Check that ``out`` (a file output) may take the build ``identity`` and open its staging folder; call
    this after every cheap check of the inputs, and write the build to the returned :attr:`StagedOutput.path`.

    ``companions`` are the suffixes (after ``<out stem>``) of the other files the build writes beside it. An
    existing output of another build, or a file veritune did not build, is refused unless ``force``; nothing
    is removed here: the output and its companions are replaced when the build commits.

    Raises:
        UserError: another command holds ``out``'s lock (:func:`hold_output_lock`); ``out`` is a directory, holds
            a different build, or its manifest describes a build whose output is missing, and ``force`` is not set.
    """
    out = Path(out)
    check_output_path(out)
    _check_writable(out.parent)
    hold_output_lock(out)
    _recover(out)
    manifest = manifest_path(out)
    owned = [out, *(out.with_name(out.stem + suffix) for suffix in companions)]
    has_manifest, previous = _read_record(manifest)
    others = [path for path in owned if path != manifest and path.exists()]
    if previous != identity and not force:
        if out.exists() or (others and not has_manifest):
            raise _refuse(out, _difference(previous, identity))
        if has_manifest and previous is not None and not _claim_left_unfinished(manifest):
            raise UserError(
                f"manifest {manifest} describes a build whose output is missing ({out} is gone); "
                f"remove the manifest, or add --force to build anew"
            )
    seed = tuple(path for path in others if path != out) if previous == identity else ()
    staging, resumed = _open_staging(out, identity, seed)
    resuming = previous == identity or resumed
    return StagedOutput(out, staging / out.name, "file", identity, resuming, tuple(path.name for path in owned))


def _claim_left_unfinished(manifest: Path) -> bool:
    """A manifest written by an older veritune when a build started (``"status": "in progress"``) protects nothing."""
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("status") == "in progress"
    except (ValueError, UnicodeDecodeError, AttributeError, OSError):
        return False


def claim_output_dir(
    out_dir: str | os.PathLike[str], identity: dict[str, Any], *, force: bool, resume_files: tuple[str, ...] = ()
) -> StagedOutput:
    """Check that ``out_dir`` (a directory output) may take the build ``identity`` and open its staging
    directory (the new ``out_dir`` to be); call this after every cheap check of the inputs, and write the
    build into the returned :attr:`StagedOutput.path`. ``resume_files`` (names inside ``out_dir``) are copied
    into a fresh staging directory when ``out_dir`` holds this same build, so the rebuild resumes from them.

    A folder that holds no veritune build, and the folders :mod:`core.ownership` protects, are refused even with
    ``force``.

    Raises:
        UserError: another command holds ``out_dir``'s lock (:func:`hold_output_lock`); ``out_dir`` is a file, a
            protected folder, holds files no veritune build wrote, or holds another build and ``force`` is not set.
    """
    out_dir = Path(out_dir)
    check_output_path(out_dir, directory=True)
    check_not_protected(out_dir, "--out")
    _check_writable(out_dir.parent)
    hold_output_lock(out_dir)
    _recover(out_dir)
    _, previous = _read_record(out_dir / BUILD_RECORD_FILE)
    holds = out_dir.is_dir() and any(child.name != BUILD_RECORD_FILE for child in out_dir.iterdir())
    if holds and not isinstance(previous, dict):  # --force replaces only a veritune build (its build record)
        raise UserError(
            f"--out {out_dir}: not written by a veritune build (no {BUILD_RECORD_FILE}); --force replaces only a "
            "veritune build: choose another --out, or an empty folder"
        )
    if holds and previous != identity and not force:
        raise _refuse(out_dir, _difference(previous, identity))
    same = holds and previous == identity
    seed = tuple(out_dir / name for name in resume_files) if same else ()
    staging, resumed = _open_staging(out_dir, identity, seed)
    return StagedOutput(out_dir, staging, "dir", identity, resuming=same or resumed)
