"""``veritune build finer`` (FINER-Tuning preference tuples) and ``veritune build finer-bench`` (FINER MCQs, or
with ``--protocol yn`` the yes/no granularity probe of FINER's Fig. 1).

    veritune build finer --scene-graphs graphs.json --image-root images --out data/finer
    veritune build finer --captions pixmo.jsonl --image-root images --out data/finer \\
        --llm-base-url http://127.0.0.1:8000/v1 --llm-model microsoft/phi-4
    veritune build finer-bench --scene-graphs graphs.json --image-root images --out data/finer_bench.csv
    veritune build finer-bench --protocol yn --scene-graphs graphs.json --image-root images --out data/finer_yn.csv
    veritune build finer-contrast --scene-graphs graphs.json --image-root images --out data/finer_contrast
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from core.cli_help import add_llm_arguments, command_help, llm_client_options
from core.errors import UserError
from core.io import build_identity, check_output_path, claim_output_dir, claim_output_file, iter_jsonl
from data_builders.export import add_also_save_argument, check_hf_copy_target, save_hf_copy
from data_builders.finer.bench import SETTINGS, BenchSettings, build_finer_bench, filter_bench_negatives
from data_builders.finer.build import (
    DEFAULT_MAX_TUPLES,
    VALIDATION_RATIO,
    build_finer_from_captions,
    build_finer_from_scene_graphs,
    check_settings,
)
from data_builders.finer.contrast import DEFAULT_CANDIDATES, FALSE_IMAGES, ContrastSettings, build_finer_contrast
from data_builders.finer.filtering import DEFAULT_THRESHOLDS, ChoiceDiscriminator
from data_builders.finer.llm import DEFAULT_ATTEMPTS, read_captions
from data_builders.finer.scene_graph import load_scene_graphs
from data_builders.finer.yn import YnSettings, build_finer_yn


def _add_llm(parser: argparse.ArgumentParser, purpose: str) -> None:
    group = add_llm_arguments(parser, purpose, model_help="model name sent to the endpoint (the paper used Phi-4-14B)")
    group.add_argument(
        "--llm-attempts",
        type=int,
        default=DEFAULT_ATTEMPTS,
        help="answers per request before a unit is skipped (bad answers are sent back with the reason)",
    )


def _add_filter(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("negative filtering (FINER App. B.3; optional)")
    group.add_argument(
        "--filter-model", help="VLM directory or hub id (AutoModelForImageTextToText) used as discriminator"
    )
    group.add_argument("--filter-device", help="cuda, cpu, ... (default: cuda when available)")
    group.add_argument(
        "--filter-max-pixels", type=int, default=448 * 448, help="images are scaled down to this many pixels"
    )
    group.add_argument("--filter-rounds", type=int, default=3, help="rounds of regenerate-and-check")
    for level, name in (("obj", "objects"), ("attr", "attributes"), ("rel", "relations")):
        group.add_argument(
            f"--theta-{level}",
            type=float,
            default=DEFAULT_THRESHOLDS[level],
            help=f"entropy threshold for {name} (Table 7, FINER-CompreCap: {DEFAULT_THRESHOLDS[level]})",
        )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build finer``, ``veritune build finer-bench`` and ``veritune build finer-contrast``."""
    finer = subparsers.add_parser("finer", help=command_help("build", "finer"))
    source = finer.add_mutually_exclusive_group(required=True)
    source.add_argument("--scene-graphs", type=Path, help="scene graphs in the FINER layout (offline, no LLM)")
    source.add_argument(
        "--captions", type=Path, help="JSON lines {image, caption} (needs --llm-base-url and --llm-model)"
    )
    finer.add_argument("--image-root", type=Path, required=True, help="directory the image paths are relative to")
    finer.add_argument(
        "--out", type=Path, required=True, help="output directory (train.jsonl, validation.jsonl, manifest.json)"
    )
    finer.add_argument("--max-tuples", type=int, default=DEFAULT_MAX_TUPLES, help="seeded uniform subsample")
    finer.add_argument("--validation-ratio", type=float, default=VALIDATION_RATIO)
    finer.add_argument("--seed", type=int, default=0)
    finer.add_argument("--force", action="store_true", help="clear an --out that holds a different build")
    add_also_save_argument(finer)
    _add_llm(finer, "--captions: extraction and negatives; --filter-model: regenerating negatives")
    _add_filter(finer)
    finer.set_defaults(handler=_build_finer)

    bench = subparsers.add_parser("finer-bench", help=command_help("build", "finer-bench"))
    bench.add_argument("--scene-graphs", type=Path, required=True, help="scene graphs in the FINER layout")
    bench.add_argument(
        "--out", type=Path, required=True, help="output CSV (a <name>.manifest.json is written beside it)"
    )
    bench.add_argument("--image-root", type=Path, help="skip (and list) records whose image is missing here")
    bench.add_argument("--max-objects", type=int, default=6, help="largest k for Multi-obj (FINER-CompreCap: 6)")
    bench.add_argument("--max-attributes", type=int, default=3, help="largest k for Multi-attr (FINER-CompreCap: 3)")
    bench.add_argument("--max-relations", type=int, default=3, help="largest k for Multi-rel (FINER-CompreCap: 3)")
    bench.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {','.join(SETTINGS)}")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    bench.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="mcq",
        help="mcq: the FINER MCQ benchmark (`finer`); yn: Fig. 1's yes/no granularity probe (`finer_yn`)",
    )
    bench.add_argument(
        "--anchors-per-image",
        type=int,
        default=1,
        help="--protocol yn: objects per image described and queried at the seven levels",
    )
    _add_llm(bench, "--filter-model: regenerating negatives")
    _add_filter(bench)
    bench.set_defaults(handler=_build_bench)

    contrast = subparsers.add_parser("finer-contrast", help=command_help("build", "finer-contrast"))
    contrast.add_argument("--scene-graphs", type=Path, required=True, help="scene graphs in the FINER layout")
    contrast.add_argument("--image-root", type=Path, required=True, help="directory the image paths are relative to")
    contrast.add_argument(
        "--out", type=Path, required=True, help="output directory (train.jsonl, validation.jsonl, manifest.json)"
    )
    contrast.add_argument(
        "--levels",
        default="1,2,3,4,5,6,7",
        help="comma-separated levels of the yes/no probe whose descriptions are asked",
    )
    contrast.add_argument(
        "--anchors-per-image", type=int, default=4, help="objects of distinct names described per image"
    )
    contrast.add_argument(
        "--candidates",
        type=int,
        default=DEFAULT_CANDIDATES,
        help="images examined when looking for one where a description is false",
    )
    contrast.add_argument(
        "--false-image",
        choices=FALSE_IMAGES,
        default="random",
        help="from level 2 on: the image where most of the description holds (nearest), or any (random)",
    )
    contrast.add_argument(
        "--max-tuples", type=int, default=DEFAULT_MAX_TUPLES, help="seeded uniform subsample (whole pairs)"
    )
    contrast.add_argument("--validation-ratio", type=float, default=VALIDATION_RATIO)
    contrast.add_argument("--seed", type=int, default=0)
    contrast.add_argument("--force", action="store_true", help="clear an --out that holds a different build")
    contrast.set_defaults(handler=_build_contrast)


PROTOCOLS = ("mcq", "yn")
YN_ONLY = ("protocol", "anchors_per_image")
MCQ_ONLY = ("max_objects", "max_attributes", "max_relations", "settings")


def _client(args: argparse.Namespace, required: str | None = None) -> Any:
    if not (args.llm_base_url and args.llm_model):
        if required:
            raise UserError(f"{required}: needs --llm-base-url and --llm-model")
        return None
    from core.llm_client import ChatClient

    return ChatClient(args.llm_base_url, args.llm_model, **llm_client_options(args))


def _discriminator(args: argparse.Namespace) -> ChoiceDiscriminator | None:
    if not args.filter_model:
        return None
    return ChoiceDiscriminator(args.filter_model, device=args.filter_device, max_pixels=args.filter_max_pixels)


# Files of a scene-graph build that an identical rebuild resumes from (the filter's answers, FINER App. B.3).
FILTER_FILES = ("filter_log.jsonl",)


def _thresholds(args: argparse.Namespace) -> dict[str, float]:
    return {"obj": args.theta_obj, "attr": args.theta_attr, "rel": args.theta_rel}


# Flags that change how a build runs, not what it writes: a rerun with other values is the same build.
_OPERATIONAL = {
    "out",
    "force",
    "handler",
    "command",
    "build_command",
    "scene_graphs",
    "captions",
    "image_root",
    "also_save",
    "llm_cache",
    "llm_concurrency",
    "llm_max_retries",
    "llm_timeout",
    "llm_api_key_env",
    "llm_base_url",
    "filter_device",
}


def _identity(args: argparse.Namespace, command: str) -> dict[str, Any]:
    settings = {key: value for key, value in vars(args).items() if key not in _OPERATIONAL}
    inputs = {
        "scene_graphs": args.scene_graphs,
        "captions": getattr(args, "captions", None),
        "image_root": args.image_root,
    }
    return build_identity(command, settings, inputs)


def _check_llm(args: argparse.Namespace, client: Any) -> None:
    """Reach the endpoint once before the build starts (only when the build will send it requests)."""
    if client is not None:
        client.check_endpoint()


def _build_finer(args: argparse.Namespace) -> int:
    # Everything that can be checked cheaply is checked before --out is looked at (docs/DATA_FORMATS.md,
    # "Build outputs"): the flags, the input file in full, the LLM endpoint when the build needs one.
    check_output_path(args.out, directory=True)
    for flag in ("scene_graphs", "captions"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            raise UserError(f"--{flag.replace('_', '-')} {path}: not found (or not a file)")
    check_settings(args.image_root, args.max_tuples, args.validation_ratio)
    if args.llm_attempts < 1:
        raise UserError(f"--llm-attempts {args.llm_attempts}: must be at least 1")
    if args.captions:
        if args.filter_model:
            raise UserError(
                "--filter-model: negative filtering needs four negatives per entity, which scene graphs have; "
                "use it with --scene-graphs"
            )
        client = _client(args, required="--captions")
        for _ in read_captions(args.captions):
            pass
        _check_llm(args, client)
    else:
        if (args.llm_base_url or args.llm_model) and not args.filter_model:
            raise UserError(
                "--llm-base-url/--llm-model: with --scene-graphs the LLM only regenerates the negatives that "
                "--filter-model drops; add --filter-model, or drop the --llm-* options"
            )
        client = _client(args)
        load_scene_graphs(args.scene_graphs)
        _check_llm(args, client if args.filter_model else None)
    if args.also_save:
        check_hf_copy_target(args.out)
    staged = claim_output_dir(args.out, _identity(args, "build finer"), force=args.force, resume_files=FILTER_FILES)
    if staged.resuming:
        print(f"{args.out} holds this same build: resuming it", flush=True)
    with staged:
        if args.captions:
            manifest = build_finer_from_captions(
                args.captions,
                args.image_root,
                staged.path,
                client,
                max_tuples=args.max_tuples,
                seed=args.seed,
                validation_ratio=args.validation_ratio,
                attempts=args.llm_attempts,
            )
        else:
            manifest = build_finer_from_scene_graphs(
                args.scene_graphs,
                args.image_root,
                staged.path,
                max_tuples=args.max_tuples,
                seed=args.seed,
                validation_ratio=args.validation_ratio,
                discriminator=_discriminator(args),
                thresholds=_thresholds(args),
                client=client,
                attempts=args.llm_attempts,
                filter_rounds=args.filter_rounds,
            )
    counts = manifest["counts"]
    print(
        f"wrote {args.out}: {counts['train']} train + {counts['validation']} validation tuples "
        f"({json.dumps(counts['by_subset'])}) of {counts['tuples_built']} built; "
        f"skipped {json.dumps(manifest['skipped'])}"
    )
    _say_missing(manifest)
    if args.also_save:
        splits = {
            split: [record for _, record in iter_jsonl(args.out / f"{split}.jsonl", what=f"{split} split")]
            for split in ("train", "validation")
        }
        copy = save_hf_copy(
            splits,
            out=args.out,
            image_key="images",
            image_root=Path(manifest.get("image_root") or args.image_root),
            fmt=args.also_save,
            command="build finer",
            manifest=args.out / "manifest.json",
        )
        print(f"wrote {copy} ({args.also_save}, images embedded, dataset card README.md)")
    return 0


def _build_bench(args: argparse.Namespace) -> int:
    check_output_path(args.out)
    if not args.scene_graphs.is_file():
        raise UserError(f"--scene-graphs {args.scene_graphs}: not found (or not a file)")
    if args.image_root is not None and not args.image_root.is_dir():
        raise UserError(f"--image-root {args.image_root}: not a directory")
    if args.protocol == "yn":
        return _build_yn(args)
    settings = BenchSettings(
        args.max_objects,
        args.max_attributes,
        args.max_relations,
        tuple(s.strip() for s in args.settings.split(",") if s.strip()),
        args.seed,
    )
    load_scene_graphs(args.scene_graphs)
    client = _client(args)
    _check_llm(args, client if args.filter_model else None)
    identity = _identity(args, "build finer-bench")
    for key in YN_ONLY:  # an MCQ build keeps the identity it had before the yes/no protocol existed
        identity["settings"].pop(key, None)
    with claim_output_file(
        args.out, identity, force=args.force, companions=(".manifest.json", ".filter_log.jsonl")
    ) as staged:
        manifest = build_finer_bench(
            args.scene_graphs,
            staged.path,
            settings,
            image_root=args.image_root,
            discriminator=_discriminator(args),
            thresholds=_thresholds(args),
            client=client,
            attempts=args.llm_attempts,
            filter_rounds=args.filter_rounds,
            build=identity,
        )
    print(
        f"wrote {args.out}: {manifest['counts']['pairs']} MCQ pairs "
        f"({json.dumps(manifest['counts']['pairs_by_setting_and_k'])}); "
        f"skipped {json.dumps(manifest['skipped'])}"
    )
    _say_missing(manifest)
    return 0


def _build_yn(args: argparse.Namespace) -> int:
    """``--protocol yn``: the yes/no granularity probe (``data_builders/finer/yn.py``). Checked like the MCQ
    build: flags, the scene graphs in full and the LLM endpoint first, then --out, then built beside it."""
    identity = _identity(args, "build finer-bench")
    for key in MCQ_ONLY:  # flags of the MCQ protocol: they change nothing here
        identity["settings"].pop(key, None)
    settings = YnSettings(seed=args.seed, anchors_per_image=args.anchors_per_image)
    discriminator = _discriminator(args)
    if discriminator is not None and args.image_root is None:
        raise UserError("--filter-model: needs --image-root (the discriminator looks at the images)")
    load_scene_graphs(args.scene_graphs)
    client = _client(args)
    _check_llm(args, client if args.filter_model else None)
    filter_negatives = None
    if discriminator is not None:

        def filter_negatives(graphs: list, out: Path) -> dict[str, Any]:
            return filter_bench_negatives(
                graphs,
                args.image_root,
                discriminator,
                _thresholds(args),
                client,
                args.llm_attempts,
                args.filter_rounds,
                args.seed,
                out,
            )

    with claim_output_file(
        args.out, identity, force=args.force, companions=(".manifest.json", ".filter_log.jsonl")
    ) as staged:
        manifest = build_finer_yn(
            args.scene_graphs,
            staged.path,
            settings,
            image_root=args.image_root,
            filter_negatives=filter_negatives,
            build=identity,
        )
    counts = manifest["counts"]
    print(
        f"wrote {args.out}: {counts['pairs']} yes/no pairs from {counts['samples']} samples "
        f"({json.dumps(counts['pairs_by_level'])}); skipped {json.dumps(manifest['skipped'])}"
    )
    _say_missing(manifest)
    return 0


def _levels(text: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise UserError(f"--levels {text}: expected comma-separated integers 1..7") from None


def _build_contrast(args: argparse.Namespace) -> int:
    """Image-contrast pairs (``data_builders/finer/contrast.py``): flags and the scene graphs checked first,
    then --out claimed, then built beside it and moved into place."""
    check_output_path(args.out, directory=True)
    if not args.scene_graphs.is_file():
        raise UserError(f"--scene-graphs {args.scene_graphs}: not found (or not a file)")
    if not args.image_root.is_dir():
        raise UserError(f"--image-root {args.image_root}: not a directory")
    settings = ContrastSettings(
        seed=args.seed,
        levels=_levels(args.levels),
        anchors_per_image=args.anchors_per_image,
        candidates=args.candidates,
        false_image=args.false_image,
        max_tuples=args.max_tuples,
        validation_ratio=args.validation_ratio,
    )
    load_scene_graphs(args.scene_graphs)
    with claim_output_dir(args.out, _identity(args, "build finer-contrast"), force=args.force) as staged:
        manifest = build_finer_contrast(args.scene_graphs, args.image_root, staged.path, settings)
    counts = manifest["counts"]
    print(
        f"wrote {args.out}: {counts['train']} train + {counts['validation']} validation rows "
        f"({counts['written'] // 2} image-contrast pairs; {json.dumps(counts['by_subset'])}); "
        f"false images {json.dumps(manifest['false_image'])}; skipped {json.dumps(manifest['skipped'])}"
    )
    _say_missing(manifest)
    return 0


def _say_missing(manifest: dict[str, Any]) -> None:
    """The first five images the build skipped because they are missing (the manifest lists them all)."""
    for name in manifest["missing_images"][:5]:
        print(f"missing image: {name}")
