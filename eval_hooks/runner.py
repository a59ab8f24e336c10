"""The eval runner: batched greedy generation, resumable predictions files, sharding over processes.

How a run goes:

1. Items already in ``predictions.jsonl`` are done; items whose images are missing or unreadable are set
   aside (the scorer counts them and never scores them as correct).
2. The rest are grouped by generation budget and image count (a batch shares one ``max_new_tokens`` and
   one image layout), sorted by estimated prompt length (text tokens plus image patches) so a batch pads
   little, and cut into batches.
3. With several processes (``accelerate launch``), every batch is split between them with
   ``PartialState.split_between_processes`` (padded, so each gets the same count), each process answers
   its share and the main process gathers the answers. All processes step through the same batches with
   the same budget and image count, so ranks that must run every forward pass together (DeepSpeed ZeRO-3,
   ``synced_gpus=True``) stay in lockstep.
4. The main process appends each batch's answers to ``predictions.jsonl`` (one ``{"id", "prediction"}``
   per line) and flushes, so an interrupted run resumes where it stopped without redoing items.

Backends: :class:`TransformersBackend` (default: left padding, greedy, a live model or a checkpoint),
:class:`VLLMBackend` (``--backend vllm``: a vLLM engine loaded from a checkpoint; needs vLLM and a GPU) and
:class:`ColocatedVLLMBackend` (the eval hook on a run with colocated vLLM rollouts: the trainer's own engine,
its weights synced from the training model first). The suite runs both vLLM backends' code against a
recording stand-in for the ``vllm`` package (tests/fake_vllm.py): no GPU here.

Blind control (``eval run --blind``): a transformers or vLLM backend given ``blind_fill`` shows the model, in
place of every image, a blank of that image's size in that one colour
(``core.images.load_image_cached``); the predictions header records it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import torch
from PIL import Image, UnidentifiedImageError

from core.errors import UserError
from core.images import load_image_cached
from core.io import atomic_write_bytes, iter_jsonl
from core.progress import progress_bar
from core.trl_adapter import mark_vllm_weights_sleeping
from eval_hooks.base import EvalItem

logger = logging.getLogger("veritune.eval")

PREDICTIONS_FILE = "predictions.jsonl"
# Qwen-VL processors turn every 28x28 pixels into one visual token; a close enough guess for sorting
# prompts of any model by length (the sort only decides which items share a batch, never the answers).
_PIXELS_PER_VISUAL_TOKEN = 28 * 28


# ---------------------------------------------------------------------------------------------- files


# The first line of a predictions file says what made it: the model (path and a content fingerprint),
# the benchmark items (a hash of ids, prompts, image names, budgets and reference fields) and the
# generation settings. A rerun into the same file resumes only when all three match.
HEADER_KEY = "veritune_predictions"
_FULL_HASH_BYTES = 64 << 20  # weight files up to this size are hashed whole; larger ones are sampled
_SAMPLE_BLOCKS, _SAMPLE_BYTES = 16, 1 << 20


def _file_fingerprint(path: Path, digest: Any) -> None:
    size = path.stat().st_size
    digest.update(f"{path.name}:{size}:".encode())
    with path.open("rb") as handle:
        if size <= _FULL_HASH_BYTES:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
            return
        for index in range(_SAMPLE_BLOCKS):  # evenly spaced blocks, first and last included
            handle.seek((size - _SAMPLE_BYTES) * index // (_SAMPLE_BLOCKS - 1))
            digest.update(handle.read(_SAMPLE_BYTES))


def model_fingerprint(model_path: str | Path | None) -> str | None:
    """SHA-256 over a checkpoint directory's config and weight files (files over 64 MiB: their size and 16
    evenly spaced 1 MiB blocks, so a 16 GB model costs a second, yet any trained weight change shows);
    None for a hub id or a path that is not a directory."""
    import hashlib

    if model_path is None or not Path(model_path).is_dir():
        return None
    path = Path(model_path)
    names = sorted(
        p.name
        for p in path.iterdir()
        if p.is_file()
        and (
            p.suffix == ".safetensors"
            or p.name.endswith(".safetensors.index.json")
            or p.name in ("config.json", "adapter_config.json")
            or (p.name.startswith("pytorch_model") and p.suffix == ".bin")
        )
    )
    if not names:
        return None
    digest = hashlib.sha256()
    for name in names:
        _file_fingerprint(path / name, digest)
    return digest.hexdigest()


def items_fingerprint(items: list[EvalItem]) -> str:
    """SHA-256 of what the model is asked and how it is scored: ids, prompts, image file names, budgets
    and the items' reference fields, in order."""
    import hashlib

    digest = hashlib.sha256()
    for item in items:
        record = [item.id, item.prompt, [Path(p).name for p in item.images], item.max_new_tokens, item.meta]
        digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str).encode() + b"\n")
    return digest.hexdigest()


def blind_label(fill: tuple[int, int, int] | list[int]) -> str:
    """How a blind control is named where it is printed: ``blind control: images replaced by a blank
    128,128,128 of the same size``."""
    return f"blind control: images replaced by a blank {','.join(map(str, fill))} of the same size"


def predictions_provenance(backend: Any, items: list[EvalItem]) -> dict[str, Any]:
    """The header of a predictions file made by ``backend`` on ``items``. A blind control's backend
    (``blind_fill`` set) adds ``generation.blind = {"fill": [R, G, B]}``, so its answers and those to the
    real images never share a file; a run on the real images writes no such key (older files resume)."""
    model_path = getattr(backend, "model_path", None)
    generation: dict[str, Any] = {"backend": backend.name, "dtype": getattr(backend, "dtype", None), "greedy": True}
    fill = getattr(backend, "blind_fill", None)
    if fill is not None:
        generation["blind"] = {"fill": list(fill)}
    return {
        "model": {
            "name": backend.model_name,
            "path": str(model_path) if model_path else None,
            "sha256": model_fingerprint(model_path),
        },
        "data": {"items": len(items), "sha256": items_fingerprint(items)},
        "generation": generation,
    }


def _images_shown(blind: dict[str, Any] | None) -> str:
    if not isinstance(blind, dict):
        return "the real images"
    return f"blank {','.join(map(str, blind.get('fill', [])))} images (a blind control)"


def provenance_mismatch(previous: dict[str, Any] | None, current: dict[str, Any]) -> str | None:
    """Why a predictions file with header ``previous`` was not made like ``current`` (None: it was)."""
    if not isinstance(previous, dict):
        return "it has no veritune header (made elsewhere or by an older version), so its model and data are unknown"
    old_model, new_model = previous.get("model") or {}, current["model"]
    if old_model.get("sha256") and new_model["sha256"]:
        same_model = old_model["sha256"] == new_model["sha256"]
    else:
        same_model = (old_model.get("path") or old_model.get("name")) == (new_model["path"] or new_model["name"])
    if not same_model:
        return (
            f"it holds answers of another model ({old_model.get('path') or old_model.get('name')}, "
            f"sha256 {str(old_model.get('sha256'))[:12]})"
        )
    if (previous.get("data") or {}).get("sha256") != current["data"]["sha256"]:
        return "it was made on other benchmark data (other file, --limit or --max-new-tokens)"
    old_blind, new_blind = (previous.get("generation") or {}).get("blind"), current["generation"].get("blind")
    if old_blind != new_blind:
        return f"it holds answers to {_images_shown(old_blind)}; this run shows {_images_shown(new_blind)}"
    if previous.get("generation") != current["generation"]:
        return f"it was made with other generation settings ({previous.get('generation')})"
    return None


def read_predictions_file(path: Path) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """``(header, {id: prediction})`` of a predictions file (header None when it has none); a torn last
    line (killed mid-write) is ignored.

    Raises:
        UserError: a line is not a prediction record, the file is not UTF-8, or an id appears twice with
            different answers.
    """
    predictions: dict[str, str] = {}
    first_line: dict[str, int] = {}
    header = None
    path = Path(path)
    if not path.is_file():
        return header, predictions
    for number, record in iter_jsonl(path, skip_invalid=True):
        if number == 1 and isinstance(record, dict) and HEADER_KEY in record:
            header = record[HEADER_KEY]
            continue
        if not isinstance(record, dict) or "id" not in record or "prediction" not in record:
            raise UserError(f'{path}, line {number}: expected {{"id": ..., "prediction": ...}}')
        key, text = str(record["id"]), str(record["prediction"])
        if key in predictions and predictions[key] != text:
            raise UserError(
                f"{path}, line {number}: id {key!r} appears again with a different prediction (first on line "
                f"{first_line[key]}); keep one answer per id"
            )
        first_line.setdefault(key, number)
        predictions[key] = text
    return header, predictions


def read_predictions(path: Path) -> dict[str, str]:
    """``{id: prediction}`` from a predictions file (see :func:`read_predictions_file`)."""
    return read_predictions_file(path)[1]


def drop_torn_tail(path: Path) -> None:
    """Cut a last line left half-written by a killed run, so appended records start on a fresh line. The kept
    lines replace the file in one rename (:func:`core.io.atomic_write_bytes`): a kill while cutting loses none."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        atomic_write_bytes(path, data[: data.rfind(b"\n") + 1])


# ---------------------------------------------------------------------------------------------- models


def load_model(model_path: str | Path, dtype: str = "auto") -> tuple[Any, Any]:
    """Model (in eval mode, on this process's device) and processor from a checkpoint directory or hub
    id; a LoRA adapter directory is merged into its base model."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = Path(model_path)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        if (path / "adapter_config.json").is_file():  # a LoRA run's output: merge into its base model
            from peft import PeftConfig, PeftModel

            base = PeftConfig.from_pretrained(path).base_model_name_or_path
            model = AutoModelForImageTextToText.from_pretrained(base, dtype=torch_dtype)
            model = PeftModel.from_pretrained(model, path).merge_and_unload()
        else:
            model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch_dtype)
        processor = AutoProcessor.from_pretrained(model_path)
    except (OSError, ValueError) as err:
        raise UserError(f"--model: cannot load {model_path} ({str(err).strip().splitlines()[0]})") from None
    return model.to(process_state().device).eval(), processor


def chat_prompt(processor: Any, item: EvalItem) -> str:
    """The item as one user turn (its images first, then its text), with the assistant turn opened."""
    content = [{"type": "image"} for _ in item.images] + [{"type": "text", "text": item.prompt}]
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )


@contextlib.contextmanager
def left_padding(processor: Any) -> Iterator[None]:
    """Pad on the left while generating (answers then start at the same position), restoring the
    processor's own setting afterwards: the training loop shares this processor."""
    tokenizer = getattr(processor, "tokenizer", processor)
    previous = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        yield
    finally:
        tokenizer.padding_side = previous


@torch.no_grad()
def generate_batch(
    model: Any,
    processor: Any,
    batch: list[EvalItem],
    *,
    synced_gpus: bool = False,
    image_cache: bool = True,
    blind_fill: tuple[int, int, int] | None = None,
) -> list[str]:
    """Greedy answers to one batch of items that share a budget and a number of images.

    ``synced_gpus`` keeps every process stepping until all have finished, as DeepSpeed ZeRO-3 needs.
    ``blind_fill``: every image is a blank of its size in that colour (a blind control).
    """
    texts = [chat_prompt(processor, item) for item in batch]
    images = [
        load_image_cached(path, cache=image_cache, blind_fill=blind_fill) for item in batch for path in item.images
    ]
    tokenizer = getattr(processor, "tokenizer", processor)
    with left_padding(processor):
        inputs = processor(text=texts, images=images or None, padding=True, return_tensors="pt").to(model.device)
    extra = {"synced_gpus": True} if synced_gpus else {}
    if tokenizer.pad_token_id is not None:
        extra["pad_token_id"] = tokenizer.pad_token_id
    output = model.generate(**inputs, max_new_tokens=batch[0].max_new_tokens, do_sample=False, use_cache=True, **extra)
    return processor.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


class Backend(Protocol):
    """What the runner needs from a generation backend."""

    name: str
    model_name: str
    tokenizer: Any

    def generate(self, batch: list[EvalItem]) -> list[str]: ...


class TransformersBackend:
    """Generation with a transformers model: a live one (the training callback) or a loaded checkpoint.
    With ``blind_fill``, a blind control: every image is a blank of its size in that colour."""

    name = "transformers"

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        synced_gpus: bool = False,
        model_name: str | None = None,
        image_cache: bool = True,
        model_path: str | Path | None = None,
        blind_fill: tuple[int, int, int] | None = None,
    ) -> None:
        self.model = model
        self.blind_fill = blind_fill
        self.model_path = model_path  # the checkpoint these weights came from (fingerprinted in predictions files)
        parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
        self.dtype = str(parameter.dtype).removeprefix("torch.") if parameter is not None else None
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.synced_gpus = synced_gpus
        self.image_cache = image_cache
        self.model_name = model_name or str(
            getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        )

    @classmethod
    def from_pretrained(
        cls, model_path: str | Path, dtype: str = "auto", *, blind_fill: tuple[int, int, int] | None = None
    ) -> TransformersBackend:
        model, processor = load_model(model_path, dtype)
        return cls(model, processor, model_name=str(model_path), model_path=model_path, blind_fill=blind_fill)

    def generate(self, batch: list[EvalItem]) -> list[str]:
        return generate_batch(
            self.model,
            self.processor,
            batch,
            synced_gpus=self.synced_gpus,
            image_cache=self.image_cache,
            blind_fill=self.blind_fill,
        )


def vllm_requests(
    processor: Any,
    batch: list[EvalItem],
    image_cache: bool = True,
    blind_fill: tuple[int, int, int] | None = None,
) -> list[dict[str, Any]]:
    """vLLM prompts for a batch: the chat-templated text (as with transformers) and the items' images
    (``blind_fill``: blanks of their sizes, as :func:`generate_batch`)."""
    requests = []
    for item in batch:
        request: dict[str, Any] = {"prompt": chat_prompt(processor, item)}
        if item.images:
            request["multi_modal_data"] = {
                "image": [load_image_cached(path, cache=image_cache, blind_fill=blind_fill) for path in item.images]
            }
        requests.append(request)
    return requests


def greedy_params(batch: list[EvalItem]) -> Any:
    """vLLM sampling parameters of the runner: greedy, the batch's budget."""
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=batch[0].max_new_tokens)


class VLLMBackend:
    """Generation with vLLM (continuous batching, paged attention): much faster on a GPU for large runs.

    Used by ``veritune eval run --backend vllm`` / ``eval watch --backend vllm``. Runs as one process
    (vLLM shards the model itself with ``tensor_parallel_size``); give it large batches (``--batch-size
    256``): each batch is one ``LLM.generate`` call. Prompts are built with the model's own chat template,
    exactly as with transformers, and decoding is greedy (temperature 0). LoRA adapter directories are
    not loaded: merge them first or use the transformers backend. Needs vLLM (``pip install -e '.[vllm]'``)
    and a CUDA GPU: without either, one ``error:`` line before anything loads.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "auto",
        max_images_per_prompt: int = 8,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        blind_fill: tuple[int, int, int] | None = None,
    ) -> None:
        from core.gpu import require_vllm

        if (Path(model_path) / "adapter_config.json").is_file():
            raise UserError(f"--backend vllm: {model_path} is a LoRA adapter; merge it or use --backend transformers")
        require_vllm("--backend vllm", "use --backend transformers")
        from transformers import AutoProcessor
        from vllm import LLM

        self.llm = LLM(
            model=str(model_path),
            dtype=dtype,
            seed=0,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            limit_mm_per_prompt={"image": max_images_per_prompt},
        )
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.model_name = str(model_path)
        self.model_path = model_path
        self.dtype = dtype
        self.blind_fill = blind_fill

    def generate(self, batch: list[EvalItem]) -> list[str]:
        requests = vllm_requests(self.processor, batch, blind_fill=self.blind_fill)
        outputs = self.llm.generate(requests, greedy_params(batch), use_tqdm=False)
        return [output.outputs[0].text for output in outputs]


class ColocatedVLLMBackend:
    """The eval hook's generation with the vLLM engine a GRPO trainer already holds (TRL ``use_vllm: true``,
    ``vllm_mode: colocate``): the model is not loaded a second time.

    ``generation`` is TRL's ``VLLMGeneration`` (``trainer.vllm_generation``): one engine per training process
    (or per tensor-parallel group), which holds the weights of the last rollout, not the weights just
    saved. :meth:`engaged` pushes the training model's current weights into it first (TRL's own
    ``sync_weights``: ZeRO-3 gathers, LoRA merges, sleep mode wakes the weights), wakes the KV cache when the
    engine sleeps between rollouts, and puts it back to sleep afterwards, as TRL's rollouts do. Every process
    takes part (the weight push is a collective); each answers its share of every batch with its own engine,
    and with ``tensor_parallel_size`` > 1 the ranks of a group answer their gathered shares together.
    Greedy, with the trainer engine's own limits (``vllm_max_model_length``; vLLM's default number of images
    per prompt): a benchmark beyond them fails on its own and is logged, as any failing benchmark is.
    """

    name = "vllm"

    def __init__(
        self,
        generation: Any,
        processor: Any,
        *,
        model_name: str,
        model_path: str | Path | None = None,
        dtype: str | None = None,
        image_cache: bool = True,
    ) -> None:
        self.generation = generation
        self.llm = generation.llm
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.model_name = model_name
        self.model_path = model_path
        self.dtype = dtype
        self.image_cache = image_cache

    @contextlib.contextmanager
    def engaged(self) -> Iterator[None]:
        """The engine holding the training model's current weights, awake, for the duration of the block."""
        sleeping = bool(getattr(self.generation, "enable_sleep_mode", False))
        self.generation.sync_weights()  # wakes the weights first when the engine sleeps
        if sleeping:
            self.llm.wake_up(tags=["kv_cache"])
        try:
            yield
        finally:
            if sleeping:  # as after a rollout: level 2 drops the weights, the next rollout pushes them again
                self.llm.sleep(level=2)
                mark_vllm_weights_sleeping(self.generation)

    def generate(self, batch: list[EvalItem]) -> list[str]:
        size = int(getattr(self.generation, "tensor_parallel_size", 1) or 1)
        share = batch
        if size > 1:  # the ranks of a tensor-parallel group must submit the same prompts (TRL does the same)
            import torch.distributed as dist

            shares: list[Any] = [None] * size
            dist.all_gather_object(shares, batch, group=self.generation.tp_group)
            batch = [item for part in shares for item in part]
        requests = vllm_requests(self.processor, batch, self.image_cache)
        outputs = self.llm.generate(requests, greedy_params(batch), use_tqdm=False)
        texts = [output.outputs[0].text for output in outputs]
        if size > 1:
            import torch.distributed as dist

            rank = dist.get_rank(group=self.generation.tp_group)
            texts = texts[rank * len(share) : (rank + 1) * len(share)]
        return texts


def get_backend(
    name: str, model_path: str | Path, dtype: str = "auto", *, blind_fill: tuple[int, int, int] | None = None
) -> Backend:
    """A backend by name (``transformers`` or ``vllm``) for a checkpoint directory or hub id; with
    ``blind_fill``, one that shows every image as a blank of its size in that colour (a blind control)."""
    if name == "transformers":
        return TransformersBackend.from_pretrained(model_path, dtype, blind_fill=blind_fill)
    if name == "vllm":
        return VLLMBackend(model_path, dtype=dtype, blind_fill=blind_fill)
    raise UserError(f"--backend: unknown backend {name!r}; choose transformers or vllm")


def process_state() -> Any:
    """accelerate's process state for evaluation. On a machine without CUDA it is asked for the CPU, so that
    the processes of `accelerate launch --multi_gpu --num_processes N` join over gloo; by default each of
    them would count itself rank 0 of 1, and every one would answer every item and write the same file."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


# ---------------------------------------------------------------------------------------------- batching


def mark_unreadable_images(items: list[EvalItem]) -> dict[Path, tuple[int, int]]:
    """Image sizes by path (read from the file headers only); an image that cannot be opened is added to
    its item's ``missing_images``, so it is skipped and counted like a missing one."""
    sizes: dict[Path, tuple[int, int]] = {}
    bad: set[Path] = set()
    for item in items:
        for path in item.images:
            if path in sizes or path in bad:
                continue
            try:
                with Image.open(path) as image:
                    sizes[path] = image.size
            except (OSError, UnidentifiedImageError):
                bad.add(path)
        item.missing_images.extend(path for path in item.images if path in bad and path not in item.missing_images)
    return sizes


def estimated_lengths(items: list[EvalItem], tokenizer: Any, sizes: dict[Path, tuple[int, int]]) -> dict[str, int]:
    """A guess of each item's prompt length in tokens: its text tokens plus its images' visual tokens."""
    if not items:
        return {}
    text_tokens = tokenizer([item.prompt for item in items])["input_ids"]
    return {
        item.id: len(tokens)
        + sum(w * h for w, h in (sizes.get(p, (0, 0)) for p in item.images)) // _PIXELS_PER_VISUAL_TOKEN
        for item, tokens in zip(items, text_tokens)
    }


def plan_batches(items: list[EvalItem], batch_size: int, lengths: dict[str, int] | None = None) -> list[list[EvalItem]]:
    """Cut ``items`` into batches that share a budget and a number of images, each sorted by ``lengths``
    (shortest first; ``None`` keeps the given order within a group)."""
    lengths = lengths or {}
    ordered = sorted(items, key=lambda it: (it.max_new_tokens, len(it.images), lengths.get(it.id, 0)))
    batches: list[list[EvalItem]] = []
    for item in ordered:
        last = batches[-1] if batches else None
        if (
            last
            and len(last) < batch_size
            and (item.max_new_tokens, len(item.images)) == (last[0].max_new_tokens, len(last[0].images))
        ):
            last.append(item)
        else:
            batches.append([item])
    return batches


# ---------------------------------------------------------------------------------------------- running


def run_items(
    backend: Backend,
    items: list[EvalItem],
    predictions_path: Path,
    *,
    batch_size: int = 8,
    desc: str = "eval",
    sort_by_length: bool = True,
    force: bool = False,
) -> dict[str, str]:
    """Answer every item not yet in ``predictions_path``, appending as batches finish; return all answers.

    The file's first line records the model, the items and the generation settings
    (:func:`predictions_provenance`); a file made otherwise is refused, or with ``force`` started over.

    Every process of a distributed run calls this with the same items; each answers a share of every
    batch and all return the same predictions. Items with missing or unreadable images are never
    generated. ``sort_by_length=False`` keeps the file order within a group (for the benchmark script).
    """
    if batch_size < 1:
        raise UserError(f"--batch-size: must be at least 1, got {batch_size}")
    state = process_state()
    predictions_path = Path(predictions_path)
    provenance = predictions_provenance(backend, items)
    done = resume_predictions(predictions_path, provenance, state, force=force)
    sizes = mark_unreadable_images(items)
    eligible = [item for item in items if not item.missing_images]
    todo = [item for item in eligible if item.id not in done]
    lengths = estimated_lengths(todo, backend.tokenizer, sizes) if sort_by_length else None
    # One batch of the plan is shared by all processes, so each of them gets about `batch_size` items.
    batches = plan_batches(todo, batch_size * state.num_processes, lengths)
    state.wait_for_everyone()  # every process has read the file before the main one appends to it
    handle = open_for_appending(predictions_path, provenance) if state.is_main_process and todo else None
    bar = progress_bar(
        total=len(eligible),
        initial=len(eligible) - len(todo),
        desc=desc,
        unit="item",
        disable=not state.is_main_process,
    )
    try:
        for batch in batches:
            fresh = answer_batch(backend, batch, state)
            done.update(fresh)
            if handle is not None:
                handle.writelines(
                    json.dumps({"id": key, "prediction": text}, ensure_ascii=False) + "\n"
                    for key, text in fresh.items()
                )
                handle.flush()
            bar.update(len(fresh))
    finally:
        bar.close()
        if handle is not None:
            handle.close()
    return done


def resume_predictions(
    predictions_path: Path, provenance: dict[str, Any], state: Any, *, force: bool
) -> dict[str, str]:
    """The answers already in ``predictions_path``; a file made otherwise is refused, or with ``force`` removed."""
    header, done = read_predictions_file(predictions_path)
    if predictions_path.is_file() and predictions_path.stat().st_size:
        reason = provenance_mismatch(header, provenance)
        if reason and not force:
            raise UserError(f"{predictions_path}: {reason}; choose another --out, or add --force to start it over")
        if reason:
            state.wait_for_everyone()  # every process has read the old file before it goes
            if state.is_main_process:
                predictions_path.unlink()
            done = {}
    return done


def open_for_appending(predictions_path: Path, provenance: dict[str, Any]) -> IO[str]:
    """The predictions file opened for appending (a torn last line dropped), its provenance line written first."""
    predictions_path.parent.mkdir(parents=True, exist_ok=True)
    drop_torn_tail(predictions_path)
    handle = predictions_path.open("a", encoding="utf-8")
    if handle.tell() == 0:
        handle.write(json.dumps({HEADER_KEY: provenance}, ensure_ascii=False) + "\n")
    return handle


def answer_batch(backend: Backend, batch: list[EvalItem], state: Any) -> dict[str, str]:
    """One batch's answers by item id, each process generating its share and all of them getting every answer."""
    from accelerate.utils import gather_object

    with state.split_between_processes(batch, apply_padding=True) as share:
        answers = list(zip((item.id for item in share), backend.generate(share)))
    if state.num_processes > 1:
        answers = gather_object(answers)
    return dict(answers)  # padding repeated the batch's last item: the dict keeps it once
