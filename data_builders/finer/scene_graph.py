"""The offline FINER-Tuning path: preference tuples from scene graphs, no LLM needed.

Input (JSON list or JSON lines), one record per image, in the CompreCap style of the FINER benchmark
files — every object, attribute and relation carries its own negatives::

    {"image": "000001.jpg",
     "objects": [{"id": "o1", "name": "dog", "negatives": ["cat", "fox", "wolf", "sheep"],
                  "attributes": [{"value": "brown", "negatives": ["white", "black", "grey", "spotted"]},
                                 {"value": "with floppy ears", "negatives": ["with pointed ears", ...]}]}],
     "relations": [{"object_a": "o1", "rel": "is lying next to", "object_b": "o2",
                    "negatives": ["is jumping over", "is hiding under", ...]}]}

For each image this yields up to eight tuples: OBJ, ATTR, REL and WH, each in the positive and the
negative configuration (FINER Sec. 3). Ψ− differs from Ψ+ in exactly one unit: the k-th object, one
attribute, or one relation clause.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from data_builders.finer.templates import Tuple, compose, compose_wh
from veritune.errors import UserError
from veritune.io import read_json_or_jsonl

MAX_UNITS = 5  # FINER extracts 1-5 objects, attributes or relations


def with_article(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def join_list(items: list[str]) -> str:
    """``a dog, a cat and a bird``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def attribute_phrase(name: str, attributes: list[str]) -> str:
    """``the brown dog with floppy ears and with a red collar``: adjectives before the noun, ``with``
    clauses after it, in their given order."""
    before = [a for a in attributes if not a.startswith("with ")]
    after = [a for a in attributes if a.startswith("with ")]
    head = " ".join(["the", *before, name])
    return head + (" " + join_list(after) if after else "")


def relation_phrase(name: str, relations: list[tuple[str, str]]) -> str:
    """``the dog that is next to the bench and is under the tree``."""
    return f"the {name} that " + join_list([f"{rel} the {other}" for rel, other in relations])


def _check(record: Any, row: int, source: str) -> dict[str, Any]:
    where = f"{source}: record {row}"
    if not isinstance(record, dict) or "image" not in record or not isinstance(record.get("objects"), list):
        raise UserError(f"{where}: expected {{image, objects: [...], relations: [...]}}")
    ids = set()
    for obj in record["objects"]:
        if not isinstance(obj, dict) or "id" not in obj or "name" not in obj:
            raise UserError(f"{where} ({record['image']}): every object needs an id and a name")
        ids.add(obj["id"])
    for rel in record.get("relations", []):
        for end in ("object_a", "object_b"):
            if rel.get(end) not in ids:
                raise UserError(f"{where} ({record['image']}): relation {rel.get('rel')!r} points to missing object {rel.get(end)!r}")
    return record


def tuples_for_image(record: dict[str, Any], rng: random.Random, skipped: Counter[str]) -> list[Tuple]:
    """Up to eight tuples (four subsets × two configurations) for one scene graph."""
    objects = {obj["id"]: obj for obj in record["objects"]}
    out: list[Tuple] = []

    # OBJ: a list of 1-5 objects; the negative replaces the k-th with one of its negatives.
    listed = [o for o in record["objects"] if o.get("negatives")]
    if listed:
        chosen = rng.sample(listed, min(MAX_UNITS, len(listed)))
        k = rng.randrange(len(chosen))
        positive = [with_article(o["name"]) for o in chosen]
        negative = list(positive)
        negative[k] = with_article(rng.choice(chosen[k]["negatives"]))
        out += compose("obj", join_list(positive), join_list(negative), rng)
    else:
        skipped["obj_no_object_with_negatives"] += 1

    # ATTR: one object with 1-5 attributes; one attribute unit is replaced.
    described = [o for o in record["objects"] if any(a.get("negatives") for a in o.get("attributes", []))]
    if described:
        obj = rng.choice(described)
        attrs = obj["attributes"][:MAX_UNITS]
        editable = [i for i, a in enumerate(attrs) if a.get("negatives")]
        k = rng.choice(editable)
        values = [a["value"] for a in attrs]
        edited = list(values)
        edited[k] = rng.choice(attrs[k]["negatives"])
        out += compose("attr", attribute_phrase(obj["name"], values), attribute_phrase(obj["name"], edited), rng)
    else:
        skipped["attr_no_attribute_with_negatives"] += 1

    # REL: one head object with 1-5 relations; one relation clause is replaced.
    by_head: dict[str, list[dict[str, Any]]] = {}
    for rel in record.get("relations", []):
        if rel.get("negatives"):
            by_head.setdefault(rel["object_a"], []).append(rel)
    if by_head:
        head = rng.choice(sorted(by_head))
        rels = by_head[head][:MAX_UNITS]
        k = rng.randrange(len(rels))
        pairs = [(r["rel"], objects[r["object_b"]]["name"]) for r in rels]
        edited = list(pairs)
        edited[k] = (rng.choice(rels[k]["negatives"]), pairs[k][1])
        name = objects[head]["name"]
        out += compose("rel", relation_phrase(name, pairs), relation_phrase(name, edited), rng)

        # WH: "what" questions about a related pair; the negative question uses the edited relation.
        rel = rels[k]
        a, b = name, objects[rel["object_b"]]["name"]
        negative_rel = edited[k][0]
        out += compose_wh(
            f"What {rel['rel']} the {b}?",
            f"The {a} {rel['rel']} the {b}.",
            f"What {negative_rel} the {b}?",
            f"Nothing {negative_rel} the {b}, but the {a} {rel['rel']} the {b}.",
        )
    else:
        skipped["rel_no_relation_with_negatives"] += 1
        skipped["wh_no_relation_with_negatives"] += 1
    return out


def load_scene_graphs(path: Path) -> list[dict[str, Any]]:
    """Read and validate a scene-graph file."""
    return [_check(record, row, str(path)) for row, record in enumerate(read_json_or_jsonl(path, what="scene-graph file"))]
