"""The DPO entry script's data: the train and validation preference datasets (any layout the readers of
:mod:`finetune.preference_data` know), the seeded validation hold-out and subsample, the rows longer than
``max_length`` dropped, and the report of what was kept and dropped (written to
``<output_dir>/preference_data.json``)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset

from core.errors import UserError
from core.images import image_budget, loaded_size
from core.sampling import sample_indices
from finetune.configs import DPOScriptArguments, VerituneDPOConfig
from finetune.data_sources import is_saved_dataset, parquet_has_split, saved_splits, uses_datasets
from finetune.preference_data import PreferenceReport, load_preference_dataset, with_images
from finetune.token_lengths import PreferenceLengths, rows_within

logger = logging.getLogger("veritune.dpo")

DATA_REPORT_FILE = "preference_data.json"


def split_indices(total: int, ratio: float, seed: int) -> tuple[list[int], list[int]]:
    """``(train, validation)`` indices: a seeded ``ratio`` of ``total`` rows (at least one) held out."""
    count = max(1, round(total * ratio))
    if count >= total:
        raise UserError(f"validation_ratio: holding out {count} of {total} rows would leave none to train on")
    held_out = set(random.Random(seed).sample(range(total), count))
    return [i for i in range(total) if i not in held_out], sorted(held_out)


def read_split(
    path: str | None, script_args: DPOScriptArguments, split: str, *, hub: bool = False
) -> tuple[Dataset, PreferenceReport]:
    """One split of any supported preference layout (``hub``: of the recipe's ``dataset_name``), with the
    reader's count of what it dropped and why."""
    report = PreferenceReport()
    image_root = Path(script_args.image_root) if script_args.image_root else None
    dataset = load_preference_dataset(
        Path(path) if path else None,
        image_root,
        script_args.data_format,
        split=split,
        report=report,
        dataset_name=script_args.dataset_name if hub else None,
        dataset_config=script_args.dataset_config if hub else None,
    )
    if len(report.missing_images) > 10:  # the reader logs the first ten
        logger.warning(
            "%s: %d more missing images, all listed in %s", path, len(report.missing_images) - 10, DATA_REPORT_FILE
        )
    return dataset, report


def held_out_split(script_args: DPOScriptArguments) -> str | None:
    """The validation split that ``dataset_path`` itself holds: ``validation`` of a ``veritune build finer``
    folder, ``validation`` (else ``dataset_test_split``) of a saved ``DatasetDict``; None for one file."""
    path = Path(script_args.dataset_path or "")
    if not script_args.dataset_path or not path.is_dir():
        return None
    if is_saved_dataset(path):
        splits = saved_splits(path) or []
        return next((s for s in ("validation", script_args.dataset_test_split) if s in splits), None)
    if uses_datasets(path):  # parquet: a validation split only when its files are named so
        return next((s for s in ("validation", script_args.dataset_test_split) if parquet_has_split(path, s)), None)
    return "validation"


def report_counts(report: PreferenceReport) -> dict[str, Any]:
    """The reader's report as plain JSON values."""
    return {
        "read": report.total,
        "kept": report.kept,
        "dropped": dict(report.dropped),
        "missing_images": report.missing_images,
    }


def count_too_long(
    dataset: Dataset,
    processor: Any,
    max_length: int,
    budgets: tuple[int | None, int | None],
    split_report: dict[str, Any],
    split: str,
) -> Dataset:
    """The rows of ``dataset`` whose prompt (its images scaled to ``budgets``: ``max_pixels`` and
    ``max_pixels_per_image``, :func:`core.images.image_budget`) plus longer answer fits in
    ``max_length`` tokens: TRL's collator cuts a longer one at ``max_length``, through its answer or its image
    tokens. The others are counted in ``split_report`` (``rows``, ``longer_than_max_length``); a split with
    no row that fits is an error naming the longest."""
    rows = dataset.to_list()

    lengths = PreferenceLengths(processor)

    max_pixels, per_image = budgets

    def size(path: str, count: int) -> tuple[int, int]:
        try:
            return loaded_size(path, image_budget(count, max_pixels or 1 << 62, per_image))
        except OSError as err:  # PIL's UnidentifiedImageError included
            raise UserError(f"{path}: unreadable image ({type(err).__name__}); remove its rows or replace it") from None

    def measure(chunk: list[dict[str, Any]]) -> list[int]:
        return lengths(chunk, [[size(path, len(row["images"])) for path in row["images"]] for row in chunk])

    kept, longest = rows_within(rows, measure, max_length, f"measuring {split} rows")
    if not kept:
        raise UserError(
            f"max_length: {max_length} tokens fits none of the {len(rows)} {split} rows (the longest, images "
            f"included, is {longest} tokens); raise max_length or lower max_pixels"
        )
    split_report["rows"] = len(kept)
    split_report["longer_than_max_length"] = len(rows) - len(kept)
    return dataset if len(kept) == len(rows) else dataset.select(kept)


def get_preference_datasets(
    script_args: DPOScriptArguments,
    training_args: VerituneDPOConfig,
    load_processor: Callable[[], Any] | None = None,
) -> tuple[Dataset, Dataset | None, dict[str, Any]]:
    """Train and (when evaluating) validation datasets, images opened on access, and a report of what was
    kept and dropped (chosen equal to rejected and missing images are dropped once, by the reader; with
    ``load_processor``, called once the rows are read, and a ``max_length``: the sampled rows longer than
    ``max_length`` tokens, counted as ``longer_than_max_length``)."""
    if not script_args.dataset_path and not script_args.dataset_name:
        raise UserError(
            "dataset_path: required (a `veritune build finer` directory, a preference JSON / JSON lines / parquet "
            "file, a save_to_disk folder), or dataset_name (a Hub dataset)"
        )
    hub = bool(script_args.dataset_name)
    train, train_report = read_split(script_args.dataset_path, script_args, script_args.dataset_train_split, hub=hub)
    evaluation, eval_report = None, None
    eval_split = held_out_split(script_args)
    if training_args.eval_strategy != "no":
        if hub and not script_args.eval_dataset_path:  # TRL's scripts: the test split of the same dataset
            evaluation, eval_report = read_split(None, script_args, script_args.dataset_test_split, hub=True)
        elif script_args.eval_dataset_path or eval_split:
            evaluation, eval_report = read_split(
                script_args.eval_dataset_path or script_args.dataset_path, script_args, eval_split or "validation"
            )
        else:  # one file: hold out Table 10's validation ratio before subsampling, so no eval row is trained on
            kept, held_out = split_indices(len(train), script_args.validation_ratio, training_args.seed)
            train, evaluation = train.select(kept), train.select(held_out)
    train = train.select(sample_indices(len(train), script_args.max_train_samples, training_args.seed))
    report: dict[str, Any] = {"train": {"rows": len(train), **report_counts(train_report)}, "eval": None}
    if evaluation is not None:
        report["eval"] = {
            "rows": len(evaluation),
            **(report_counts(eval_report) if eval_report else {"held_out_of_train": True}),
        }
    budgets = script_args.max_pixels, script_args.max_pixels_per_image
    if load_processor is not None and training_args.max_length is not None:
        processor = load_processor()
        train = count_too_long(train, processor, training_args.max_length, budgets, report["train"], "train")
        if evaluation is not None:
            evaluation = count_too_long(
                evaluation, processor, training_args.max_length, budgets, report["eval"], "validation"
            )
    evaluation = None if evaluation is None else with_images(evaluation, *budgets)
    return with_images(train, *budgets), evaluation, report
