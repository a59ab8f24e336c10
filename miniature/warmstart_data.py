"""The warm-start's data: the table of examples ``finetune/sft.py`` trains the miniature's base model on.

    veritune build warmstart-data --annotations outputs/demo/world/train/instances.json \
        --image-root outputs/demo/world/train/images --out outputs/demo/warmstart-data/train.jsonl \
        --questions-per-image 2 --no-captions --answer-styles plain --seed 0

The data are what a VLM is conventionally trained on, made from a COCO-format ``instances.json`` of the
train split (``veritune build synthetic-world``): per image POPE-random-style yes/no questions (and, with
``captions``, one caption listing the annotated classes), positives sampled from the present classes and negatives
drawn uniformly from the absent ones, each answered plainly and/or in the R1 tags of ORIC Fig. 11. Nothing in the
labels is flipped or rule-based: every answer is true of its image. The contextual bias comes from the statistics
of such data, as in COCO: present objects are mostly in context and uniformly drawn absent classes are mostly out
of context, so "is this class typical of the scene?" answers most questions right and is learned long before the
fine object evidence that the rest need.

With ``multi_image`` the data also hold the questions of a MIOH-format file ("Fine-Grained Multi-Image Object
Hallucination Benchmark", Sec. 3; ``veritune build mioh-rft``, its images under the same image root), worded as the
``mioh`` benchmark and GRPO's multi-image rows word them and answered with the right letter
(:func:`multi_image_examples`): how the miniature's multi-image half teaches the base MIOH's answer format on easy
questions before GRPO meets the hard ones.

With ``attribute_pairs_per_image`` the data also ask about the objects' attributes in FINER's yes/no probe wording
(:func:`attribute_pair_examples`, from the split's scene graphs): what a model needs to see to tell FINER's
fine-grained negatives from the positives (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base).

:func:`write_warmstart_table` writes the examples as the prompt-completion table ``finetune/sft.py`` reads (JSON
lines of ``prompt``, ``completion``, ``images``; each image named relative to ``--image-root``, which the run is
given as ``image_root``) and ``<out stem>.manifest.json`` beside it (settings, counts, the build's identity).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from core.errors import UserError
from core.finer_yn import QUESTION as FINER_YN_QUESTION
from core.io import atomic_write_json, atomic_write_text, read_json
from core.mcq_format import read_mioh_questions
from core.prompts import R1_OPTION_INSTRUCTION, with_r1_instruction
from data_builders.oric.questions import PARAPHRASES, with_article
from eval_hooks.answers import OPTION_LETTERS
from eval_hooks.mcq import letter_list, lettered, option_block

# POPE's question and ORIC's four paraphrases: the wordings a conventional instruction mix holds.
QUESTION_TEMPLATES = ("Is there {object} in the image?", *PARAPHRASES)
R1_REASONING = "I look at the objects in the image."
MCQ_QUESTION = "Which of these objects can you see in the image?"
MCQ_OPTIONS = 5  # one present class and four absent ones, like FINER's five options
ANSWER_STYLES = ("plain", "r1")
TABLE_FORMAT = "sft-prompt-completion-jsonl"


@dataclass(frozen=True)
class WarmstartSettings:
    """What shapes the table (the flags of ``veritune build warmstart-data``, which name them in errors).

    Attributes:
        questions_per_image: POPE-random-style questions per image and label (yes and no each).
        captions: one caption per image listing its classes.
        mcq_per_image: multiple-choice questions per image (one present class among four absent ones, answered
            with the option's letter, as VQA instruction mixes hold them).
        answer_styles: ``plain`` (Yes. / No.) and/or ``r1`` (ORIC Fig. 11's <REASONING>/<SOLUTION> tags).
        attribute_pairs_per_image: per image and attribute slot, this many scene-graph objects each give a pair of
            FINER yes/no probe questions (:func:`attribute_pair_examples`); 0: none.
        attribute_pair_slots: the attribute slots asked about (0-based positions in each object's ``attribute``
            list; a drawn synthetic world: 0 shade, 1 border, 2 pattern); None: every slot the scene graphs have.
        multi_image: a MIOH-format file whose questions join the table (:func:`multi_image_examples`); None: none.
        seed: the draws' and the final shuffle's seed (a run's ``seed`` in the recipes that generated these data
            before they were a table).
    """

    questions_per_image: int = 2
    captions: bool = True
    mcq_per_image: int = 0
    answer_styles: tuple[str, ...] = ANSWER_STYLES
    attribute_pairs_per_image: int = 0
    attribute_pair_slots: tuple[int, ...] | None = None
    multi_image: str | None = None
    seed: int = 0

    def check(self) -> None:
        """Raises UserError naming the flag of the first setting out of range."""
        unknown = [style for style in self.answer_styles if style not in ANSWER_STYLES]
        if unknown or not self.answer_styles:
            raise UserError(
                f"--answer-styles: expected a non-empty subset of plain, r1, got {list(self.answer_styles)}"
            )
        for flag, value in (
            ("--questions-per-image", self.questions_per_image),
            ("--mcq-per-image", self.mcq_per_image),
            ("--attribute-pairs-per-image", self.attribute_pairs_per_image),
        ):
            if value < 0:
                raise UserError(f"{flag}: must be at least 0, got {value}")
        slots = self.attribute_pair_slots
        if slots is not None and (not slots or any(slot < 0 for slot in slots)):
            raise UserError(f"--attribute-pair-slots: expected slot positions 0, 1, ..., got {list(slots)}")


def default_scene_graphs(annotations: str | Path) -> Path:
    """Where the attribute pairs' scene graphs are read when none are named: ``scene_graphs.json`` beside the
    annotation file (a synthetic world's split)."""
    return Path(annotations).with_name("scene_graphs.json")


def load_present_classes(annotations: str | Path) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """``([(file_name, present classes in annotation order)], all class names)`` of a COCO instances file."""
    data = read_json(annotations, what="annotation file")
    try:
        names = {c["id"]: c["name"] for c in data["categories"]}
        present: dict[int, list[str]] = {image["id"]: [] for image in data["images"]}
        for ann in data["annotations"]:
            name = names[ann["category_id"]]
            if name not in present[ann["image_id"]]:
                present[ann["image_id"]].append(name)
        files = [(image["file_name"], present[image["id"]]) for image in data["images"]]
    except (KeyError, TypeError) as err:
        raise UserError(
            f"{annotations}: expected a COCO instances file (images, annotations, categories); missing {err}"
        ) from None
    return files, [c["name"] for c in data["categories"]]


def caption(present: list[str]) -> str:
    """``The image shows a cup, a bowl and an oven.``"""
    objects = [with_article(name) for name in present]
    listed = objects[0] if len(objects) == 1 else ", ".join(objects[:-1]) + " and " + objects[-1]
    return f"The image shows {listed}."


def answer(label: str, style: str) -> str:
    """A yes/no answer, plain or in the R1 tags."""
    if style == "r1":
        return f"<REASONING> {R1_REASONING} </REASONING> <SOLUTION> {label} </SOLUTION>"
    return "Yes." if label == "yes" else "No."


def object_mcq(present: list[str], absent: list[str], rng: random.Random) -> tuple[str, str] | None:
    """A lettered question naming one present class among four absent ones (drawn uniformly), and its
    answer letter; None when the image lacks a present class or four absent ones."""
    if not present or len(absent) < MCQ_OPTIONS - 1:
        return None
    right = rng.choice(present)
    options = [right, *rng.sample(absent, MCQ_OPTIONS - 1)]
    rng.shuffle(options)
    lettered_options = lettered(with_article(name) for name in options)
    question = (
        f"{MCQ_QUESTION}\n{option_block(lettered_options)}\n"
        f"Please answer with a single capital letter ({letter_list(lettered_options)})."
    )
    return question, OPTION_LETTERS[options.index(right)]


def _example(prompt: str, completion: str, image: str) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": prompt}],
        "completion": [{"role": "assistant", "content": completion}],
        "images": [image],
    }


def conventional_examples(
    annotations: str | Path,
    image_root: str | Path,
    *,
    questions_per_image: int,
    captions: bool,
    styles: list[str] | tuple[str, ...],
    seed: int,
    mcq_per_image: int = 0,
) -> list[dict[str, Any]]:
    """Prompt-completion examples (TRL's conversational format, one image each) from the annotation file,
    shuffled with ``seed``; each image is named by its ``file_name`` (relative to ``image_root``).

    Raises:
        UserError: a malformed annotation file or an image that cannot be read.
    """
    rng = random.Random(seed)
    files, class_names = load_present_classes(annotations)
    image_root = Path(image_root)
    examples: list[dict[str, Any]] = []
    for file_name, present in files:
        path = image_root / file_name
        try:  # decoded once here so that a bad file is named now; the rows keep the path (decoded per batch)
            with Image.open(path) as opened:
                opened.convert("RGB")
        except (OSError, ValueError) as err:
            raise UserError(f"{path}: cannot read the image of {annotations} ({err})") from None
        pairs: list[tuple[str, str]] = []
        if captions and present:
            pairs.append(("Describe the objects in the image.", caption(present)))
        absent = [name for name in class_names if name not in present]
        yes = rng.sample(present, min(questions_per_image, len(present)))
        no = rng.sample(absent, min(questions_per_image, len(absent)))  # uniform over absent classes (POPE random)
        for name, label in [*((n, "yes") for n in yes), *((n, "no") for n in no)]:
            question = rng.choice(QUESTION_TEMPLATES).format(object=with_article(name))
            for style in styles:
                prompt = with_r1_instruction(question) if style == "r1" else question
                pairs.append((prompt, answer(label, style)))
        for _ in range(mcq_per_image):
            mcq = object_mcq(present, absent, rng)
            if mcq:
                pairs.append(mcq)
        examples.extend(_example(prompt, completion, file_name) for prompt, completion in pairs)
    rng.shuffle(examples)
    return examples


def attribute_pair_examples(
    scene_graphs: str | Path,
    image_root: str | Path,
    *,
    per_image: int,
    slots: list[int] | tuple[int, ...] | None,
    seed: int,
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """FINER yes/no probe pairs about the objects' attributes (``attribute_pairs_per_image``): per image and slot,
    up to ``per_image`` objects drawn with a ``seed``-ed generator among those whose ``neg_attribute[slot]`` is
    not empty, each asked ``QUESTION`` (core.finer_yn) about "<object> <true phrase>" → ``Yes.`` and
    "<object> <neg_attribute[slot][0]>" → ``No.``. Returns the examples (in graph order; each image named by the
    graph's ``image``, relative to ``image_root``) and the number of pairs per slot.

    Raises:
        UserError: a missing or malformed scene-graph file, a slot no object has, or a missing image.
    """
    path = Path(scene_graphs)
    if not path.is_file():
        raise UserError(f"{path}: scene graphs not found (--attribute-pairs-per-image reads them; see --scene-graphs)")
    graphs = read_json(path, what="scene-graph file")
    try:
        widest = max((len(o["attribute"]) for g in graphs for o in g["objects"]), default=0)
    except (KeyError, TypeError) as err:
        raise UserError(f"{path}: expected a list of scene graphs with objects and their attributes; {err}") from None
    if slots is None:
        slots = list(range(widest))
    elif max(slots) >= widest:
        raise UserError(
            f"--attribute-pair-slots: slot {max(slots)} is not in {path} (its objects have at most {widest} attributes)"
        )
    rng = random.Random(seed)
    root = Path(image_root)
    counts = dict.fromkeys(slots, 0)
    examples: list[dict[str, Any]] = []
    for index, graph in enumerate(graphs):
        try:
            image, objects = graph["image"], graph["objects"]
            chosen = []
            for slot in slots:
                usable = [o for o in objects if len(o["neg_attribute"]) > slot and o["neg_attribute"][slot]]
                chosen += [(slot, o) for o in rng.sample(usable, min(per_image, len(usable)))]
            pairs = [
                (slot, f"{o['object']} {phrase}", label)
                for slot, o in chosen
                for phrase, label in ((o["attribute"][slot], "Yes."), (o["neg_attribute"][slot][0], "No."))
            ]
        except (KeyError, TypeError, IndexError) as err:
            raise UserError(
                f"{path}: graph {index}: expected image, objects, attribute and neg_attribute ({err})"
            ) from None
        if pairs and not (root / image).is_file():
            raise UserError(f"{root / image}: image of {path} not found (check --image-root)")
        for slot, target, label in pairs:
            counts[slot] += label == "Yes."
            examples.append(_example(FINER_YN_QUESTION.format(x=target), label, image))
    return examples, counts


def multi_image_examples(path: str | Path, image_root: str | Path, styles: tuple[str, ...]) -> list[dict[str, Any]]:
    """The questions of a MIOH-format file as examples, once per answer style: the prompt the ``mioh`` benchmark
    asks (:func:`core.mcq_format.mioh_prompt`; under ``r1`` with the R1 instruction asking for the letter, as
    GRPO's ``oric_r1`` rows ask it), answered with the right letter, every image named relative to ``image_root``.

    Raises:
        UserError: the file's own errors (:func:`core.mcq_format.read_mioh_questions`, naming the row), or an image
            outside ``image_root`` or missing.
    """
    root = Path(image_root)
    questions = read_mioh_questions(Path(path), root)
    examples = []
    for question in questions:
        images = []
        for image in question.images:
            if not image.is_file():
                raise UserError(f"{path}: question {question.id}: image {image} not found (check --image-root)")
            try:
                images.append(image.relative_to(root).as_posix())
            except ValueError:
                raise UserError(f"{path}: question {question.id}: image {image} is not under {root}") from None
        for style in styles:
            if style == "r1":
                prompt = with_r1_instruction(question.prompt, R1_OPTION_INSTRUCTION)
                completion = f"<REASONING> {R1_REASONING} </REASONING> <SOLUTION> {question.answer} </SOLUTION>"
            else:
                prompt, completion = question.prompt, question.answer
            examples.append(
                {
                    "prompt": [{"role": "user", "content": prompt}],
                    "completion": [{"role": "assistant", "content": completion}],
                    "images": images,
                }
            )
    return examples


def warmstart_examples(
    annotations: str | Path,
    image_root: str | Path,
    settings: WarmstartSettings,
    scene_graphs: str | Path | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The table's rows and their counts: :func:`conventional_examples` of the annotation file, and with
    ``attribute_pairs_per_image`` :func:`attribute_pair_examples` of ``scene_graphs`` (default: beside the
    annotation file) drawn with ``seed + 1``, the two shuffled together with ``seed``. The same settings give the
    same rows in the same order, the examples ``finetune/sft.py`` generated itself before it read a table."""
    examples = conventional_examples(
        annotations,
        image_root,
        questions_per_image=settings.questions_per_image,
        captions=settings.captions,
        styles=settings.answer_styles,
        seed=settings.seed,
        mcq_per_image=settings.mcq_per_image,
    )
    counts: dict[str, Any] = {"conventional": len(examples), "attribute_questions": 0}
    if settings.attribute_pairs_per_image:
        graphs = Path(scene_graphs) if scene_graphs else default_scene_graphs(annotations)
        pairs, per_slot = attribute_pair_examples(
            graphs,
            image_root,
            per_image=settings.attribute_pairs_per_image,
            slots=settings.attribute_pair_slots,
            seed=settings.seed + 1,  # a generator of its own: the conventional examples stay those of the same seed
        )
        counts.update(
            attribute_questions=len(pairs),
            attribute_pairs_by_slot={str(slot): n for slot, n in per_slot.items()},
            summary=(
                f"attribute pairs: {len(pairs)} questions ({len(pairs) // 2} pairs; per slot "
                f"{', '.join(f'{slot}: {n}' for slot, n in per_slot.items())}) from {graphs} added to "
                f"{len(examples)} examples"
            ),
        )
        examples = examples + pairs
        random.Random(settings.seed).shuffle(examples)
    if settings.multi_image:
        multi = multi_image_examples(settings.multi_image, image_root, settings.answer_styles)
        counts["multi_image_questions"] = len(multi)
        examples = examples + multi
        random.Random(settings.seed + 2).shuffle(examples)  # the tables without them keep their order
    counts["examples"] = len(examples)
    if not examples:
        raise UserError(f"{annotations}: no example could be made (no image, or every count set to 0)")
    return examples, counts


def _lines(examples: list[dict[str, Any]]) -> Iterator[str]:
    for example in examples:
        yield json.dumps(example, ensure_ascii=False) + "\n"


def write_warmstart_table(
    annotations: str | Path,
    image_root: str | Path,
    out: str | Path,
    settings: WarmstartSettings,
    *,
    scene_graphs: str | Path | None = None,
    build: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write :func:`warmstart_examples` to ``out`` (JSON lines, atomically) and ``<out stem>.manifest.json``
    beside it; returns the manifest (``counts``: examples, conventional ones, attribute questions and pairs per
    slot; ``summary``: the attribute pairs' line)."""
    settings.check()
    out = Path(out)
    examples, counts = warmstart_examples(annotations, image_root, settings, scene_graphs)
    atomic_write_text(out, _lines(examples))
    summary = counts.pop("summary", None)
    manifest = {
        "format": TABLE_FORMAT,
        "columns": ["prompt", "completion", "images"],
        "source": str(annotations),
        "scene_graphs": str(scene_graphs or default_scene_graphs(annotations))
        if settings.attribute_pairs_per_image
        else None,
        "image_root": str(Path(image_root).resolve()),
        "settings": {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(settings).items()},
        "counts": counts,
        "summary": summary,
        "build": build,
    }
    atomic_write_json(out.with_name(out.stem + ".manifest.json"), manifest)
    return manifest
