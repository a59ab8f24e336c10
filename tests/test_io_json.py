"""``core.io.json_text``: the same text as ``json.dumps(indent=..., ensure_ascii=False)``, to the byte,
on the records builders write and on every shape it leaves to ``json.dumps``."""

from __future__ import annotations

import json
import math

import pytest

from core.io import atomic_write_json, json_chunks, json_text


def record(number: int, **extra: object) -> dict:
    return {
        "id": number,
        "image": f"COCO_val2014_{number:012d}.jpg",
        "target_object": "traffic light",
        "problem": [f'Is there a {number}% "odd" \\ thing\nhere?', "é ünïcode ✓", "tab\there", "nul\x00byte"],
        "solution": "yes",
        "roi_area": 1234.5 + number,
        "object_size": None,
        "judge_verdict": True if number % 2 else False,
        "clip_score": -0.0 if number % 3 else 1e-300,
        "big": 10**30,
        **extra,
    }


SHAPES = {
    "records (the builders' outputs)": [record(n) for n in range(5)],
    "records with NaN and infinities": [record(0, x=math.nan), record(1, x=math.inf), record(2, x=-math.inf)],
    "records with empty lists and tuples": [{"a": [], "b": (1, "x"), "c": {}} for _ in range(3)],
    "records with '%' and quotes in keys": [{'50% "of"': n, "\u2603": [n, n]} for n in range(3)],
    "one record": [{"k": "v"}],
    "records of unequal list lengths": [{"a": [1, 2]}, {"a": [1]}],
    "records with other key orders": [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
    "records with nested records": [{"a": {"b": [1, {"c": None}]}}, {"a": {"b": []}}],
    "records with non-string keys": [{1: "a", 2.5: "b", None: "c", False: "d"}],
    "records of lists of lists": [{"a": [[1], [2]]}, {"a": [[3], [4]]}],
    "records with no keys": [{}, {}],
    "not records": [1, "two", [3], {"four": 4}],
    "a mapping": {"output": "x.json", "counts": {"yes": 1, "no": 2}, "list": [1, 2.5, "3"]},
    "an empty list": [],
    "a scalar": "just text",
}


@pytest.mark.parametrize("indent", [0, 2, 4, "\t", None])
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_json_text_is_json_dumps_to_the_byte(shape: str, indent: int | str | None) -> None:
    data = SHAPES[shape]
    assert json_text(data, indent) == json.dumps(data, indent=indent, ensure_ascii=False)


@pytest.mark.parametrize("records_per_chunk", [1, 2, 5, 6])
def test_json_chunks_join_to_the_same_text(records_per_chunk: int) -> None:
    data = [record(n) for n in range(5)]
    chunks = list(json_chunks(data, 4, records_per_chunk=records_per_chunk))
    assert "".join(chunks) == json.dumps(data, indent=4, ensure_ascii=False)


def test_json_text_leaves_errors_to_json_dumps() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text([{"a": {1, 2}}], 4)
    looped: list = []
    looped.append({"a": looped})
    with pytest.raises(ValueError, match="Circular reference"):
        json_text(looped, 4)


def test_atomic_write_json_writes_the_same_bytes(tmp_path) -> None:
    data = [record(n) for n in range(50)]
    atomic_write_json(tmp_path / "out.json", data, indent=4)
    expected = json.dumps(data, indent=4, ensure_ascii=False) + "\n"
    assert (tmp_path / "out.json").read_bytes() == expected.encode("utf-8")


def test_a_file_hashed_as_it_was_read_or_written_is_not_read_again(tmp_path, monkeypatch) -> None:
    import hashlib
    import os

    from core import io as vio

    source = tmp_path / "in.json"
    source.write_text('{"a": [1, 2]}\n')
    assert vio.read_json(source, hashed=True) == {"a": [1, 2]}
    out = vio.atomic_write_json(tmp_path / "out.json", [record(n) for n in range(3)], indent=4, hashed=True)
    expected = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in (source, out)}
    monkeypatch.setattr(vio.Path, "open", lambda *a, **k: pytest.fail("read again"))
    assert {path: vio.sha256_file(path) for path in expected} == expected
    monkeypatch.undo()
    source.write_text('{"a": [1, 2, 3]}\n')  # rewritten: another size and time, hashed afresh
    os.utime(source, ns=(1, 1))
    assert vio.sha256_file(source) == hashlib.sha256(source.read_bytes()).hexdigest()


def test_data_kept_by_gc_paused_is_frozen_and_the_collector_resumes() -> None:
    import gc

    from core.io import gc_paused

    frozen = gc.get_freeze_count()
    try:
        with gc_paused(keep=True):
            kept = [[n] for n in range(1000)]
            assert not gc.isenabled()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.unfreeze()
