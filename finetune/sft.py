"""Supervised warm-start: the "conventionally trained" base model of the miniature ORIC / FINER experiments.

    accelerate launch --config_file recipes/accelerate/single.yaml finetune/sft.py \
        recipes/miniature/tiny_sft_warmstart.yaml

The data are what a VLM is conventionally trained on, made from a COCO-format ``instances.json`` of the
train split (``veritune build synthetic-world``): per image POPE-random-style yes/no questions (and, with
``captions``, one caption listing the annotated classes), positives sampled from the present classes and negatives drawn
uniformly from the absent ones, each answered once plainly and once in the R1 tags of ORIC Fig. 11.
Nothing in the labels is flipped or rule-based: every answer is true of its image. The contextual bias
comes from the statistics of such data, as in COCO: present objects are mostly in context and uniformly
drawn absent classes are mostly out of context, so "is this class typical of the scene?" answers most
questions right and is learned long before the fine object evidence that the rest need.

With ``attribute_pairs_per_image`` the data also ask about the objects' attributes in FINER's yes/no probe
wording (:func:`attribute_pair_examples`, from the split's scene graphs): what a model needs to see to tell
FINER's fine-grained negatives from the positives (docs/LAB_NOTEBOOK.md, "Sixteen vision tokens and a pretrained,
frozen vision tower").

Training is TRL's ``SFTTrainer`` on prompt-completion conversations (loss on the completion only).

Ready-made examples can be given instead of the annotation file: rows in TRL's conversational
prompt-completion layout (``prompt``, ``completion``: lists of ``{"role", "content"}`` messages; ``images``: a
list of paths under ``image_root`` or embedded ``datasets.Image`` features) as JSON lines, a JSON list,
parquet, a ``save_to_disk`` folder or a Hub dataset (``dataset_name``; :mod:`finetune.data_sources`).
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, List, Value
from datasets import Image as ImageFeature
from PIL import Image
from trl import SFTConfig, SFTTrainer

from core.errors import UserError
from core.finer_yn import QUESTION as FINER_YN_QUESTION
from core.io import read_json
from core.prompts import with_r1_instruction
from core.sampling import sample_indices
from data_builders.oric.questions import PARAPHRASES, with_article
from eval_hooks.answers import OPTION_LETTERS
from eval_hooks.mcq import letter_list, lettered, option_block
from finetune.configs import ScriptArguments, VerituneModelConfig
from finetune.data_sources import embedded_image_dir, iter_records, resolve_image, source_label, uses_datasets
from finetune.recipe import run_entry_script
from finetune.training import get_callbacks, get_model_and_processor, start_run, train_with_hooks

logger = logging.getLogger("veritune.sft")

# POPE's question and ORIC's four paraphrases: the wordings a conventional instruction mix holds.
QUESTION_TEMPLATES = ("Is there {object} in the image?", *PARAPHRASES)
R1_REASONING = "I look at the objects in the image."
MCQ_QUESTION = "Which of these objects can you see in the image?"
MCQ_OPTIONS = 5  # one present class and four absent ones, like FINER's five options


@dataclass
class SFTScriptArguments(ScriptArguments):
    """Conventional supervised data from a COCO-format annotation file (``dataset_path``)."""

    questions_per_image: int = field(
        default=2, metadata={"help": "POPE-random-style questions per image and label (yes and no each)."}
    )
    captions: bool = field(default=True, metadata={"help": "Add one caption per image listing its classes."})
    mcq_per_image: int = field(
        default=0,
        metadata={
            "help": "Multiple-choice questions per image: which of five classes is in the image (one present, "
            "four absent drawn uniformly), answered with the option's letter, as VQA instruction mixes hold them."
        },
    )
    answer_styles: list[str] = field(
        default_factory=lambda: ["plain", "r1"],
        metadata={"help": "plain (Yes. / No.) and/or r1 (ORIC Fig. 11's <REASONING>/<SOLUTION> tags)."},
    )
    attribute_pairs_per_image: int = field(
        default=0,
        metadata={
            "help": "Per train image and attribute slot, this many scene-graph objects (seeded draw) each give a "
            "pair of questions in FINER's yes/no probe wording: its true attribute phrase answered 'Yes.', its "
            "first negative (`neg_attribute[slot][0]`, a value the image does not show for that class) 'No.'. "
            "Only objects with a negative for the slot count. 0: none (the conventional data only)."
        },
    )
    attribute_pair_slots: list[int] | None = field(
        default=None,
        metadata={
            "help": "With attribute_pairs_per_image: the attribute slots asked about, as 0-based positions in each "
            "object's `attribute` list (a drawn synthetic world: 0 shade, 1 border, 2 pattern); default: every "
            "slot the scene graphs have."
        },
    )
    scene_graphs_path: str | None = field(
        default=None,
        metadata={
            "help": "With attribute_pairs_per_image: the scene graphs (FINER's layout) of the train images; "
            "default: scene_graphs.json beside dataset_path (a synthetic world's split). Their `image` paths are "
            "resolved against image_root."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [style for style in self.answer_styles if style not in ("plain", "r1")]
        if unknown or not self.answer_styles:
            raise UserError(f"answer_styles: expected a non-empty subset of [plain, r1], got {self.answer_styles}")
        if self.questions_per_image < 0:
            raise UserError(f"questions_per_image: must be at least 0, got {self.questions_per_image}")
        if self.mcq_per_image < 0:
            raise UserError(f"mcq_per_image: must be at least 0, got {self.mcq_per_image}")
        if self.attribute_pairs_per_image < 0:
            raise UserError(f"attribute_pairs_per_image: must be at least 0, got {self.attribute_pairs_per_image}")
        if self.attribute_pair_slots is not None and (
            not self.attribute_pair_slots or any(slot < 0 for slot in self.attribute_pair_slots)
        ):
            raise UserError(
                f"attribute_pair_slots: expected a non-empty list of slot positions (0, 1, ...), got "
                f"{self.attribute_pair_slots}"
            )

    def scene_graph_file(self) -> Path:
        """Where the attribute pairs' scene graphs are read: ``scene_graphs_path``, else ``scene_graphs.json``
        beside ``dataset_path``."""
        if self.scene_graphs_path:
            return Path(self.scene_graphs_path)
        if not self.dataset_path:
            raise UserError("scene_graphs_path: required for attribute_pairs_per_image with a Hub dataset_name")
        return Path(self.dataset_path).with_name("scene_graphs.json")


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


def conventional_examples(
    annotations: str | Path,
    image_root: str | Path,
    *,
    questions_per_image: int,
    captions: bool,
    styles: list[str],
    seed: int,
    mcq_per_image: int = 0,
) -> list[dict[str, Any]]:
    """Prompt-completion examples (TRL's conversational format, one image each) from the annotation file."""
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
        for prompt, completion in pairs:
            examples.append(
                {
                    "prompt": [{"role": "user", "content": prompt}],
                    "completion": [{"role": "assistant", "content": completion}],
                    "images": [str(path)],
                }
            )
    rng.shuffle(examples)
    return examples


def attribute_pair_examples(
    scene_graphs: str | Path,
    image_root: str | Path,
    *,
    per_image: int,
    slots: list[int] | None,
    seed: int,
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """FINER yes/no probe pairs about the objects' attributes (``attribute_pairs_per_image``): per image and slot,
    up to ``per_image`` objects drawn with a ``seed``-ed generator among those whose ``neg_attribute[slot]`` is
    not empty, each asked ``QUESTION`` (core.finer_yn) about "<object> <true phrase>" → ``Yes.`` and
    "<object> <neg_attribute[slot][0]>" → ``No.``. Returns the examples (in graph order) and the number of pairs
    per slot.

    Raises:
        UserError: a missing or malformed scene-graph file, a slot no object has, or a missing image.
    """
    path = Path(scene_graphs)
    if not path.is_file():
        raise UserError(f"{path}: scene graphs not found (attribute_pairs_per_image reads them; set scene_graphs_path)")
    graphs = read_json(path, what="scene-graph file")
    try:
        widest = max((len(o["attribute"]) for g in graphs for o in g["objects"]), default=0)
    except (KeyError, TypeError) as err:
        raise UserError(f"{path}: expected a list of scene graphs with objects and their attributes; {err}") from None
    if slots is None:
        slots = list(range(widest))
    elif max(slots) >= widest:
        raise UserError(
            f"attribute_pair_slots: slot {max(slots)} is not in {path} (its objects have at most {widest} attributes)"
        )
    rng = random.Random(seed)
    root = Path(image_root)
    counts = dict.fromkeys(slots, 0)
    examples: list[dict[str, Any]] = []
    for index, graph in enumerate(graphs):
        try:
            image, objects = root / graph["image"], graph["objects"]
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
        if pairs and not image.is_file():
            raise UserError(f"{image}: image of {path} not found (check image_root)")
        for slot, target, label in pairs:
            counts[slot] += label == "Yes."
            examples.append(
                {
                    "prompt": [{"role": "user", "content": FINER_YN_QUESTION.format(x=target)}],
                    "completion": [{"role": "assistant", "content": label}],
                    "images": [str(image)],
                }
            )
    return examples, counts


def is_example_table(script_args: ScriptArguments) -> bool:
    """Whether the data are ready-made examples (a table: module doc), not a COCO-format annotation file."""
    path = script_args.dataset_path
    if script_args.dataset_name or uses_datasets(path) or Path(path or "").suffix in (".jsonl", ".parquet"):
        return True
    with Path(path or "").open("rb") as handle:
        return handle.read(1 << 12).lstrip().startswith(b"[")


def _messages(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        raise UserError(f"{where}: '{key}' must be a list of {{role, content}} messages with text content")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def table_examples(script_args: ScriptArguments) -> list[dict[str, Any]]:
    """Prompt-completion examples read from a table (module doc); every error names the row and the key."""
    root = Path(script_args.image_root or ".")
    extract = embedded_image_dir(script_args.dataset_path, script_args.dataset_name)
    examples = []
    records = iter_records(
        script_args.dataset_path,
        name=script_args.dataset_name,
        config=script_args.dataset_config,
        split=script_args.dataset_train_split,
    )
    for where, record in records:
        if not isinstance(record, dict):
            raise UserError(f"{where}: expected an object with prompt, completion and images")
        missing = [key for key in ("prompt", "completion", "images") if key not in record]
        if missing:
            raise UserError(f"{where}: missing key '{missing[0]}' (SFT rows hold prompt, completion and images)")
        images = record["images"] if isinstance(record["images"], list) else [record["images"]]
        paths = []
        for reference in images:
            found, looked_for = resolve_image(reference, root, extract)
            if found is None:
                raise UserError(f"{where}: image not found: {looked_for} (check image_root)")
            paths.append(found)
        examples.append(
            {
                "prompt": _messages(record["prompt"], where, "prompt"),
                "completion": _messages(record["completion"], where, "completion"),
                "images": paths,
            }
        )
    if not examples:
        raise UserError(f"{source_label(script_args.dataset_path, script_args.dataset_name, None, 'train')}: no rows")
    return examples


def training_examples(script_args: SFTScriptArguments, seed: int) -> list[dict[str, Any]]:
    """The run's examples: :func:`conventional_examples` of the recipe's annotation file (or the ready-made
    :func:`table_examples`), with ``attribute_pairs_per_image`` plus :func:`attribute_pair_examples` (the two
    shuffled together with ``seed``), then, with ``max_train_samples``, the seeded uniform subsample every
    trainer draws (``sample_indices``)."""
    if is_example_table(script_args):
        examples = table_examples(script_args)
    else:
        examples = conventional_examples(
            script_args.dataset_path,
            script_args.image_root,
            questions_per_image=script_args.questions_per_image,
            captions=script_args.captions,
            styles=script_args.answer_styles,
            seed=seed,
            mcq_per_image=script_args.mcq_per_image,
        )
    if script_args.attribute_pairs_per_image:
        pairs, counts = attribute_pair_examples(
            script_args.scene_graph_file(),
            script_args.image_root or ".",
            per_image=script_args.attribute_pairs_per_image,
            slots=script_args.attribute_pair_slots,
            seed=seed + 1,  # a generator of its own: the conventional examples stay those of the same seed
        )
        logger.info(
            "attribute pairs: %d questions (%d pairs; per slot %s) from %s added to %d examples",
            len(pairs),
            len(pairs) // 2,
            ", ".join(f"{slot}: {n}" for slot, n in counts.items()),
            script_args.scene_graph_file(),
            len(examples),
        )
        examples = examples + pairs
        random.Random(seed).shuffle(examples)
    if script_args.max_train_samples:
        examples = [examples[i] for i in sample_indices(len(examples), script_args.max_train_samples, seed)]
    return examples


def examples_dataset(examples: list[dict[str, Any]]) -> Dataset:
    """The examples as a ``datasets.Dataset`` whose images are file paths, decoded to RGB when a batch is
    collated (in the data-loader workers): the rows hold no pixels, so nothing is re-encoded up front and an
    image shared by several questions is stored once on disk, not once per row."""
    message = List({"role": Value("string"), "content": Value("string")})
    features = Features({"prompt": message, "completion": message, "images": List(ImageFeature(mode="RGB"))})
    return Dataset.from_list(examples, features=features)


class PositionIdsCollator:
    """A collator that adds the M-RoPE ``position_ids`` to each batch of ``collator``.

    Qwen-VL-style models compute these 3-D position ids from the token ids and image grids in every forward
    (``compute_3d_position_ids``), in Python, on the training process. Here the same method of the same model
    computes them while the batch is collated, in the data-loader workers, and the forward uses them as given:
    the same ids, so the same training, with less work on the process that trains.
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, Any]], compute: Callable[..., Any]) -> None:
        self.collator = collator
        self.compute = compute
        self._accepts = set(inspect.signature(compute).parameters)

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(examples)
        kwargs = {"inputs_embeds": None, "past_key_values": None, "video_grid_thw": None}
        kwargs.update({k: v for k, v in batch.items() if k in self._accepts and k != "position_ids"})
        position_ids = self.compute(**{k: v for k, v in kwargs.items() if k in self._accepts})
        if position_ids is not None:
            batch["position_ids"] = position_ids
        return batch


def with_position_ids(collator: Any, model: Any) -> Any:
    """``collator`` wrapped in :class:`PositionIdsCollator` when ``model`` computes M-RoPE position ids
    itself (the Qwen-VL family and its kin), else ``collator`` unchanged."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    compute = getattr(inner, "compute_3d_position_ids", None)
    if compute is None or "input_ids" not in inspect.signature(compute).parameters:
        return collator
    return PositionIdsCollator(collator, compute)


def main(script_args: SFTScriptArguments, training_args: SFTConfig, model_args: VerituneModelConfig) -> None:
    if start_run(training_args, script_args, model_args):
        return
    if not script_args.dataset_path and not script_args.dataset_name:
        raise UserError(
            "dataset_path: required (a COCO-format instances.json of the train split, or prompt-completion rows), "
            "or dataset_name (a Hub dataset of prompt-completion rows)"
        )
    if not script_args.image_root and not is_example_table(script_args):
        raise UserError("image_root: required (the folder holding the annotation file's images)")
    if script_args.attribute_pairs_per_image and not script_args.scene_graph_file().is_file():
        raise UserError(
            f"{script_args.scene_graph_file()}: scene graphs not found (attribute_pairs_per_image reads them; set "
            "scene_graphs_path)"
        )
    model, processor, peft_config = get_model_and_processor(model_args)
    examples = training_examples(script_args, training_args.seed)
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=examples_dataset(examples),
        processing_class=processor,
        peft_config=peft_config,
        callbacks=get_callbacks(script_args, training_args, model_args),
    )
    trainer.data_collator = with_position_ids(trainer.data_collator, trainer.model)
    source = source_label(
        script_args.dataset_path, script_args.dataset_name, script_args.dataset_config, script_args.dataset_train_split
    )
    kind = "examples" if is_example_table(script_args) else "conventional examples (captions and yes/no questions)"
    summary = f"{len(examples)} {kind} from {source}"
    train_with_hooks(trainer, processor, script_args, training_args, model_args, data_summary=summary)


if __name__ == "__main__":
    run_entry_script(main, (SFTScriptArguments, SFTConfig, VerituneModelConfig))
