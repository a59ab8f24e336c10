"""``veritune build oric``, ``veritune build oric-bench`` and ``veritune build check-leakage``."""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from core.cli_help import add_llm_arguments, command_help, llm_client_options
from core.errors import UserError
from core.io import build_identity, check_output_path, claim_output_file, manifest_path, read_json
from core.llm_client import ChatClient
from data_builders.export import add_also_save_argument, check_hf_copy_target, save_hf_copy
from data_builders.oric.annotations import load_instances
from data_builders.oric.build import BuildSettings, build_oric_file, leaked_images, oric_file_images
from data_builders.oric.clip_negatives import DEFAULT_CLIP_MODEL
from data_builders.oric.judges import JUDGES, get_judge, judge_factory
from data_builders.oric.review import write_review_html


def _add_common(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("--annotations", type=Path, required=True, help="COCO-format instances JSON")
    parser.add_argument("--image-root", type=Path, required=True, help="directory holding the images")
    parser.add_argument(
        "--out", type=Path, required=True, help="output JSON (<name>.manifest.json is written beside it)"
    )
    parser.add_argument("--force", action="store_true", help="replace an --out that holds a different build")
    default_yes = 300 if kind == "train" else 1000
    parser.add_argument("--num-yes", type=int, default=default_yes, help="yes questions")
    parser.add_argument("--num-no", type=int, default=default_yes, help="no questions")
    parser.add_argument("--yes-per-image", type=int, default=2, help="present objects asked per query image")
    parser.add_argument("--no-per-image", type=int, default=2, help="absent objects asked per similar image")
    parser.add_argument("--min-classes", type=int, default=2, help="query images need this many annotated classes")
    parser.add_argument(
        "--context-judge",
        default="cooccurrence",
        help=f"the ROI context judge (ORIC Fig. 6): {', '.join(JUDGES)} (an LLM), or a judge factory's dotted path",
    )
    parser.add_argument(
        "--context-judge-threshold", type=float, default=0.25, help="cooccurrence: P(target|context) for 'yes'"
    )
    # Deprecated spellings (before `--llm-*` became the one LLM flag family): accepted, hidden.
    parser.add_argument("--judge", dest="context_judge", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--judge-threshold",
        dest="context_judge_threshold",
        type=float,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    add_llm_arguments(parser, "--context-judge openai", max_tokens=None)
    parser.add_argument(
        "--clip-model",
        default=DEFAULT_CLIP_MODEL,
        help="CLIP/SigLIP hub id or local directory (offline: a directory, or a model already in the HF cache)",
    )
    parser.add_argument(
        "--clip-cache", type=Path, default=Path("outputs/cache/clip"), help="image embedding cache (resume)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="CLIP embedding batch size")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--exclude-images-from", type=Path, help="never use images that appear in this ORIC file")
    parser.add_argument("--review-html", type=Path, help="also write a contact sheet of sampled items")
    parser.add_argument(
        "--review-sample", type=int, default=300, help="items on the sheet, half yes and half no (paper: 300)"
    )
    add_also_save_argument(parser)
    parser.set_defaults(handler=partial(_build, kind=kind))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ORIC build commands."""
    _add_common(subparsers.add_parser("oric", help=command_help("build", "oric")), "train")
    _add_common(subparsers.add_parser("oric-bench", help=command_help("build", "oric-bench")), "bench")
    leak = subparsers.add_parser(
        "check-leakage",
        help=command_help("build", "check-leakage"),
        description="Exit 2 when the two ORIC files share an image (a training set must not "
        "contain ORIC-Bench images); exit 0 and say so when they share none.",
    )
    leak.add_argument("first", type=Path, help="an ORIC JSON file (e.g. the training questions)")
    leak.add_argument("second", type=Path, help="another ORIC JSON file (e.g. ORIC-Bench)")
    leak.set_defaults(handler=_check_leakage)


def _build(args: argparse.Namespace, kind: str) -> int:
    # Everything that can be checked cheaply is checked before --out is looked at (docs/DATA_FORMATS.md,
    # "Build outputs"): the flags, the input files, the judge and its endpoint.
    for flag, value, least in (
        ("--num-yes", args.num_yes, 0),
        ("--num-no", args.num_no, 0),
        ("--yes-per-image", args.yes_per_image, 1),
        ("--no-per-image", args.no_per_image, 1),
        ("--min-classes", args.min_classes, 2),
        ("--batch-size", args.batch_size, 1),
    ):
        if value < least:
            raise UserError(f"{flag} must be at least {least} (got {value})")
    llm_options = llm_client_options(args)
    check_output_path(args.out)
    if not args.image_root.is_dir():
        raise UserError(f"--image-root: not a directory: {args.image_root}")
    instances = load_instances(args.annotations)
    exclude = oric_file_images(args.exclude_images_from) if args.exclude_images_from else None
    judge_factory(args.context_judge)
    if args.context_judge == "cooccurrence" and (args.llm_base_url or args.llm_model):
        raise UserError(
            "--llm-base-url/--llm-model: the cooccurrence context judge asks no LLM; use --context-judge openai, "
            "or drop the --llm-* options"
        )
    client: ChatClient | None = None
    if args.context_judge == "openai":
        if not args.llm_base_url or not args.llm_model:
            raise UserError("--context-judge openai needs --llm-base-url and --llm-model")
        # The judge's own client: its endpoint check waits for its first cache miss when the cache already
        # holds answers of this model (a fully cached rebuild runs offline), else it probes now.
        client = ChatClient(args.llm_base_url, args.llm_model, **llm_options)
        try:
            client.check_endpoint()
        except UserError:
            client.close()
            raise
    identity = _identity(args, kind)
    settings = BuildSettings(
        kind, args.num_yes, args.num_no, args.yes_per_image, args.no_per_image, args.min_classes, args.seed
    )
    judge = partial(
        get_judge,
        args.context_judge,
        threshold=args.context_judge_threshold,
        base_url=args.llm_base_url,
        model=args.llm_model,
        **llm_options,
        **({"client": client} if client is not None else {}),
    )
    if args.also_save:
        check_hf_copy_target(args.out)
    try:
        with claim_output_file(args.out, identity, force=args.force) as staged:
            _, stats = build_oric_file(
                args.annotations,
                args.image_root,
                staged.path,
                settings,
                judge_factory=judge,
                clip_model=args.clip_model,
                clip_cache=args.clip_cache,
                batch_size=args.batch_size,
                exclude_images=exclude,
                build=identity,
                instances=instances,
            )
    finally:
        if client is not None:
            client.close()
    out = args.out
    items = read_json(out)
    if args.review_html:
        write_review_html(items, args.annotations, args.image_root, args.review_html, args.review_sample, args.seed)
    yes = sum(item["label"] == "yes" for item in items)
    print(
        f"wrote {out} and {manifest_path(out)}: {yes} yes + {len(items) - yes} no questions; "
        f"skipped {json.dumps(dict(stats.skipped))}"
    )
    for what, names in (("missing", stats.missing_images), ("unreadable", stats.unreadable_images)):
        if names:
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            print(
                f"{what} image files ({len(names)}, all listed in the manifest): {', '.join(names[:5])}{more}",
                file=sys.stderr,
            )
    if args.also_save:
        copy = save_hf_copy(
            {"train" if kind == "train" else "test": items},
            out=out,
            image_key="image",
            image_root=args.image_root,
            fmt=args.also_save,
            command=f"build oric{'-bench' if kind == 'bench' else ''}",
            manifest=manifest_path(out),
        )
        print(f"wrote {copy} ({args.also_save}, images embedded, dataset card README.md)")
    if yes < args.num_yes or len(items) - yes < args.num_no:
        print(
            f"warning: asked for {args.num_yes} yes + {args.num_no} no, the annotations gave fewer (see 'skipped')",
            file=sys.stderr,
        )
    return 0


# Flags that change how a build runs, not what it writes: a rerun with other values is the same build.
_OPERATIONAL = {
    "out",
    "force",
    "handler",
    "llm_cache",
    "llm_concurrency",
    "llm_max_retries",
    "llm_api_key_env",
    "llm_base_url",
    "clip_cache",
    "batch_size",
    "review_html",
    "review_sample",
    "annotations",
    "image_root",
    "also_save",
    "exclude_images_from",
}


def _identity(args: argparse.Namespace, kind: str) -> dict:
    settings = {
        key: value
        for key, value in vars(args).items()
        if key not in _OPERATIONAL and not key.endswith("_command") and key != "command"
    }
    inputs = {
        "annotations": args.annotations,
        "image_root": args.image_root,
        "exclude_images_from": args.exclude_images_from,
    }
    return build_identity(f"build oric{'-bench' if kind == 'bench' else ''}", settings, inputs)


def _check_leakage(args: argparse.Namespace) -> int:
    shared = leaked_images(args.first, args.second)
    if shared:
        raise UserError(
            f"{len(shared)} image(s) appear in both {args.first} and {args.second}, first: {', '.join(shared[:5])}"
        )
    print(f"no shared images between {args.first} and {args.second}")
    return 0
