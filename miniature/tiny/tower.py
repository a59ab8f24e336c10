"""Pretraining a tiny VLM's vision tower on per-instance attributes, before any instruction tuning.

Real VLMs' vision towers are pretrained (contrastively, CLIP/SigLIP) before the language model ever sees them;
a tiny model's random tower is not, and in the miniature FINER experiment it does not tie a drawn attribute to
one object (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base). This is the short objective that lets it: for each
scene-graph object of a train image, linear heads on the merged vision token the language model gets at the
centre of the object's box (the largest box of its class, as the scene graph holds each class once) predict its
class and the value of each attribute slot. Only the vision tower (its merger included:
:func:`finetune.models.vision_modules`) and the heads train; the language model is untouched.

Each slot's value vocabulary comes from the data: the words of an attribute phrase that vary between the phrases
(attributes and negatives) of one class in that slot (``with a light red color`` / ``with a dark red color`` →
``light`` / ``dark``, the class's hue left out; ``with a black border`` / ``with a white border`` → ``black`` /
``white``), collected over the train split's graphs; an eval split is labelled with the train split's values.

    veritune tiny-model --size demo --patch-size 8 --out tiny --pretrain-vision world/train \\
        --pretrain-vision-eval world/dev
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json, read_json
from core.ownership import check_replaceable
from miniature.tiny.models import IDENTITY_FILE  # the tiny model's identity, stats added here

STATS_KEY = "vision_pretraining"
CLASS_HEAD = "class"
IGNORE = -100  # a target the split does not give (a value the train split never showed, a missing slot)


@dataclass
class SplitTargets:
    """One split's images and, per image, ``(centre y, centre x, class index, slot value indices)`` of each
    scene-graph object: its box centre as fractions of the image's height and width, :data:`IGNORE` for a
    target the split does not give."""

    images: list[Path]
    objects: list[list[tuple[float, float, int, list[int]]]]


def check_split(split: str | Path) -> tuple[Path, Path]:
    """``(instances.json, scene_graphs.json)`` of a split folder, or a one-line error naming what is missing."""
    split = Path(split)
    missing = [name for name in ("instances.json", "scene_graphs.json") if not (split / name).is_file()]
    if not split.is_dir() or missing:
        raise UserError(
            f"{split}: not a split folder of `veritune build synthetic-world` (missing "
            f"{', '.join(missing) or 'the folder'}; it needs instances.json, scene_graphs.json and images/)"
        )
    return split / "instances.json", split / "scene_graphs.json"


def _varying_words(graphs: list[dict[str, Any]]) -> dict[int, set[str]]:
    """Per slot, the words that differ between the phrases of one class (its attributes and their negatives):
    ``light`` and ``dark`` in ``with a light red color`` / ``with a dark red color``, never the class's hue."""
    phrases: dict[tuple[int, str], set[str]] = {}
    for graph in graphs:
        for obj in graph["objects"]:
            negatives = obj.get("neg_attribute", [])
            for slot, phrase in enumerate(obj["attribute"]):
                group = phrases.setdefault((slot, obj["object"]), set())
                group.update([phrase, *(negatives[slot] if slot < len(negatives) else [])])
    varying: dict[int, set[str]] = {}
    for (slot, _), group in phrases.items():
        words = [set(phrase.split()) for phrase in group]
        varying.setdefault(slot, set()).update(set.union(*words) - set.intersection(*words))
    return varying


def _value(phrase: str, varying: set[str]) -> str:
    """The value a phrase names: its words that vary within a class (:func:`_varying_words`), in order; the whole
    phrase where none do."""
    return " ".join(word for word in phrase.split() if word in varying) or phrase


def attribute_values(graphs: list[dict[str, Any]]) -> list[list[str]]:
    """Per attribute slot, the sorted values the graphs' objects show (module doc: the words of a phrase that
    vary between the phrases, negatives included, of one class)."""
    varying = _varying_words(graphs)
    values: list[set[str]] = [set() for _ in range(max((slot + 1 for slot in varying), default=0))]
    for graph in graphs:
        for obj in graph["objects"]:
            for slot, phrase in enumerate(obj["attribute"]):
                values[slot].add(_value(phrase, varying[slot]))
    return [sorted(v) for v in values]


def load_split(
    split: str | Path, classes: list[str] | None = None, values: list[list[str]] | None = None
) -> tuple[SplitTargets, list[str], list[list[str]]]:
    """The split's targets, its class names (``instances.json``'s categories, or ``classes``) and each slot's
    values (:func:`attribute_values`, or ``values``: an eval split is labelled with the train split's
    vocabulary, an unseen value ignored).

    Raises:
        UserError: a split without ``instances.json`` / ``scene_graphs.json``, or whose graphs name an object
            without a box or an image missing from the annotations.
    """
    annotations, graph_file = check_split(split)
    instances = read_json(annotations, what="annotation file")
    graphs = read_json(graph_file, what="scene-graph file")
    try:
        names = {c["id"]: c["name"] for c in instances["categories"]}
        classes = classes or [c["name"] for c in instances["categories"]]
        images = {image["file_name"]: image for image in instances["images"]}
        largest: dict[tuple[int, str], dict[str, Any]] = {}
        for ann in instances["annotations"]:
            key = (ann["image_id"], names[ann["category_id"]])
            if key not in largest or ann["area"] > largest[key]["area"]:
                largest[key] = ann
    except (KeyError, TypeError) as err:
        raise UserError(f"{annotations}: expected a COCO instances file; missing {err}") from None
    try:
        values = values if values is not None else attribute_values(graphs)
        varying = _varying_words(graphs)
        targets = SplitTargets([], [])
        for graph in graphs:
            image = images.get(graph["image"])
            if image is None:
                raise UserError(f"{graph_file}: image {graph['image']} is not in {annotations}")
            rows = []
            for obj in graph["objects"]:
                box = largest.get((image["id"], obj["object"]))
                if box is None:
                    raise UserError(f"{graph_file}: {graph['image']}: {obj['object']} has no box in {annotations}")
                x, y, w, h = box["bbox"]
                centre = ((y + h / 2) / image["height"], (x + w / 2) / image["width"])
                slots = []
                for slot, vocabulary in enumerate(values):
                    phrase = obj["attribute"][slot] if slot < len(obj["attribute"]) else None
                    value = None if phrase is None else _value(phrase, varying.get(slot, set()))
                    slots.append(vocabulary.index(value) if value in vocabulary else IGNORE)
                label = classes.index(obj["object"]) if obj["object"] in classes else IGNORE
                rows.append((*centre, label, slots))
            path = Path(split) / "images" / graph["image"]
            if not path.is_file():
                raise UserError(f"{path}: image of {graph_file} not found")
            targets.images.append(path)
            targets.objects.append(rows)
    except (KeyError, TypeError) as err:
        raise UserError(f"{graph_file}: expected scene graphs with image, objects and attributes; {err}") from None
    return targets, classes, values


def _head_names(values: list[list[str]]) -> list[str]:
    return [CLASS_HEAD, *(f"attribute_{slot}" for slot in range(len(values)))]


class _Objective:
    """The vision tower, the processor and the linear heads; :meth:`logits` of a batch of images."""

    def __init__(self, model: Any, processor: Any, classes: list[str], values: list[list[str]]) -> None:
        import torch

        self.model, self.processor = model, processor
        vision = model.config.vision_config
        self.merge = vision.spatial_merge_size
        hidden = getattr(vision, "out_hidden_size", None) or model.config.text_config.hidden_size
        sizes = [len(classes), *(len(v) for v in values)]
        self.heads = torch.nn.ModuleDict(
            {name: torch.nn.Linear(hidden, size) for name, size in zip(_head_names(values), sizes)}
        )

    def logits(self, split: SplitTargets, batch: list[int]) -> dict[str, tuple[Any, Any]]:
        """Per head, ``(logits, targets)`` of every object of the images ``batch`` (indices into ``split``)."""
        import torch
        from PIL import Image

        pictures = []
        for index in batch:
            with Image.open(split.images[index]) as opened:
                pictures.append(opened.convert("RGB"))
        inputs = self.processor.image_processor(images=pictures, return_tensors="pt")
        grids = inputs["image_grid_thw"]
        features = self.model.get_image_features(inputs["pixel_values"], grids).pooler_output
        picked, targets = [], []
        for tokens, grid, index in zip(features, grids.tolist(), batch):
            rows, columns = grid[1] // self.merge, grid[2] // self.merge
            for row, column, label, slots in split.objects[index]:
                token = min(int(row * rows), rows - 1) * columns + min(int(column * columns), columns - 1)
                picked.append(tokens[token])
                targets.append([label, *slots])
        if not picked:
            return {}
        stacked, labels = torch.stack(picked), torch.tensor(targets)
        return {name: (head(stacked), labels[:, k]) for k, (name, head) in enumerate(self.heads.items())}

    def accuracy(self, split: SplitTargets, batch_size: int) -> dict[str, float | None]:
        """Per head, the percentage of labelled objects of ``split`` whose argmax is right."""
        import torch

        right: dict[str, int] = dict.fromkeys(self.heads, 0)
        total: dict[str, int] = dict.fromkeys(self.heads, 0)
        self.model.eval()
        with torch.no_grad():
            for start in range(0, len(split.images), batch_size):
                batch = list(range(start, min(start + batch_size, len(split.images))))
                for name, (logits, labels) in self.logits(split, batch).items():
                    known = labels != IGNORE
                    right[name] += int((logits.argmax(-1)[known] == labels[known]).sum())
                    total[name] += int(known.sum())
        self.model.train()
        return {name: round(100 * right[name] / total[name], 1) if total[name] else None for name in self.heads}


def _replace_dir(built: Path, out: Path) -> None:
    """Move the finished folder ``built`` to ``out``, replacing what was there (the old folder is removed only
    after the new one is in place)."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(built, out)
    shutil.rmtree(old, ignore_errors=True)


def pretrain_vision_tower(
    model_dir: str | Path,
    train_split: str | Path,
    out_dir: str | Path | None = None,
    *,
    steps: int = 1000,
    eval_split: str | Path | None = None,
    seed: int = 0,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    threads: int | None = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Pretrain the vision tower of the tiny model in ``model_dir`` on ``train_split``'s objects (module doc) and
    write the model to ``out_dir`` (default: ``model_dir`` itself, replaced), atomically: a temporary folder
    beside it, renamed when complete. The statistics (steps, seconds, the heads' values, the eval split's
    accuracy per head before and after) are returned and written into the model's ``veritune_tiny.json`` under
    ``"vision_pretraining"``.

    AdamW at ``learning_rate`` on ``batch_size`` images per step (images in a seeded random order, reshuffled
    each pass), ``threads`` torch threads (None: torch's default), a progress line every 100 steps.

    Raises:
        UserError: a split folder without ``instances.json`` or ``scene_graphs.json``, a model without a vision
            tower, a bad step count.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from finetune.models import vision_modules

    model_dir = Path(model_dir)
    out = Path(out_dir) if out_dir is not None else model_dir
    check_replaceable(out, "--out", (IDENTITY_FILE,), "veritune tiny-model")
    if steps < 1:
        raise UserError(f"--pretrain-vision-steps: must be at least 1, got {steps}")
    if not (model_dir / "config.json").is_file():
        raise UserError(f"{model_dir}: not a model folder (no config.json)")
    train, classes, values = load_split(train_split)
    held_out = load_split(eval_split, classes, values)[0] if eval_split is not None else None
    if not any(train.objects):
        raise UserError(f"{train_split}: its scene graphs hold no objects")
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
        processor = AutoProcessor.from_pretrained(model_dir)
        tower = vision_modules(model)
        if not tower:
            raise UserError(f"{model_dir}: {type(model).__name__} has no vision tower veritune recognises")
        objective = _Objective(model, processor, classes, values)
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        trained = [p for _, module in tower for p in module.parameters()]
        for parameter in trained:
            parameter.requires_grad_(True)
        # torch's multi-tensor kernels (its default on GPUs; on the CPU it loops over the tensors): the same
        # weights bit for bit, fewer calls (miniature/cpu_speed.py: foreach_adamw)
        optimizer = torch.optim.AdamW([*trained, *objective.heads.parameters()], lr=learning_rate, foreach=True)
        before = objective.accuracy(held_out, batch_size) if held_out is not None else None
        if before is not None:
            log(f"held-out accuracy before: {json.dumps(before)}")
        model.train()
        rng, order, loss_value = random.Random(seed), [], float("nan")
        start = time.time()
        for step in range(1, steps + 1):
            if not order:
                order = list(range(len(train.images)))
                rng.shuffle(order)
            batch = [order.pop() for _ in range(min(batch_size, len(order)))]
            outputs = objective.logits(train, batch)
            if not outputs:
                continue
            loss = sum(
                torch.nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE)
                for logits, labels in outputs.values()
                if (labels != IGNORE).any()
            )
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss_value = loss.item()
            if step % 100 == 0:
                log(f"vision pretraining step {step}/{steps}: loss {loss_value:.3f}, {time.time() - start:.0f} s")
        seconds = round(time.time() - start, 1)
        after = objective.accuracy(held_out, batch_size) if held_out is not None else None
        if after is not None:
            log(f"held-out accuracy after: {json.dumps(after)}")
        stats: dict[str, Any] = {
            "train": str(train_split),
            "eval": None if eval_split is None else str(eval_split),
            "steps": steps,
            "seconds": seconds,
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "seed": seed,
            "final_loss": round(loss_value, 4),
            "heads": {CLASS_HEAD: classes, **{f"attribute_{slot}": v for slot, v in enumerate(values)}},
            "eval_accuracy_before": before,
            "eval_accuracy_after": after,
        }
        built = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(built, ignore_errors=True)
        shutil.copytree(model_dir, built)
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        model.eval()
        model.save_pretrained(built)
        identity_file = built / IDENTITY_FILE
        identity = read_json(identity_file, what="tiny model identity") if identity_file.is_file() else {}
        atomic_write_json(identity_file, {**identity, STATS_KEY: stats}, indent=None)
        _replace_dir(built, out)
    finally:
        torch.set_num_threads(saved_threads)
    return stats
