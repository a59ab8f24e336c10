"""``veritune demo``: the miniature ORIC and FINER experiments, end to end on a CPU, offline, in one run.

The ORIC half, on the first core:

1. a synthetic world with scene priors (``veritune build synthetic-world``): COCO ``instances.json``,
   FINER-layout scene graphs and a POPE-random-style question file per split (train, val, and dev, on which
   ``veritune demo-select`` chose the GRPO recipe's replay ratio; the demo itself never reads dev);
2. tiny models: a random-initialised Qwen3-VL (``veritune tiny-model``) and a tiny CLIP trained on the train split
   so that ORIC's CLIP-guided negatives mean something;
3. the base model: a supervised warm-start on conventional data (``finetune/sft.py``, cached under
   ``~/.cache/veritune/warmstart/`` by a hash of its recipe, code, data and seed; any number of demos may share that
   cache at once: ``core.cache``);
4. ORIC training data (train images) and ORIC-Bench (val images) with the real builders, and the leakage check;
5. GRPO from the base model (``finetune/grpo.py``, ``recipes/miniature/tiny_oric_miniature.yaml``: plain answers,
   with conventional questions of the train split replayed beside ORIC's), whose eval hook scores ORIC-Bench and
   the POPE-random-style questions of the val split before the first step and after the last.

The FINER half (``miniature.finer_half``), on the second core from the start: a 16-token base whose pretrained, frozen
vision tower sees per-instance attributes (cached under ``~/.cache/veritune/seeing-base/``), DPO on image-contrast
pairs, and its eval hook on FINER's yes/no probe and POPE; its DPO's data worker runs the frozen reference model
(``miniature.cpu_speed.reference_in_workers``) and takes the core the ORIC half leaves once that has trained.
``--finer tuples`` runs a control instead: DPO on FINER-Tuning's tuples from the ORIC half's base (built in step 4,
trained beside GRPO), which cannot see the attributes those tuples ask about, so its FINER rows do not move.

Then the before/after table: each eval hook's step-0 baseline against the trained model, on the same items, with
95% paired bootstrap intervals (``OUT/results.json``, ``OUT/results.txt``).

Every stage is keyed by what makes its output: its arguments (``--steps``, ``--seed``, the sizes, paths counted
relative to ``OUT`` so that a demo folder can be copied or moved), the recipe it reads and the keys of the stages it
builds on (``OUT/stages/<stage>.json``, :func:`run_stage`). A stage whose key is unchanged and whose output is
complete is reused (the summary lists those); one whose key changed is removed and rerun, and with it every stage
built on it; an interrupted stage with the same key resumes. Each process starts on one torch thread; which stages
run together, and on how many threads, changes no number on the machines measured.

The stages are the functions of ``miniature.stages`` (``build_world``, ``build_tiny_models``, ``build_data``,
``warm_start``, ``build_oric``, ``train_grpo``, ``build_finer``, ``train_dpo``, each taking ``demo_paths(out)``) and
of ``miniature.finer_half``, so ``veritune demo-select`` (``miniature.selection``) runs the same stages on the dev
split; the command line of both lives in ``veritune.demo_cli``.
"""

from __future__ import annotations

import time
from pathlib import Path

from core.errors import UserError
from miniature.stages import (
    FINER_HALVES,
    REPO_ROOT,
    STAGE_STATUS,
    TABLE,
    Background,
    announce_stage,
    build_data,
    build_tiny_qwen,
    build_world,
    claim_demo_dir,
    demo_paths,
    pin_threads,
    report_command,
    results_table,
    start_command,
    summarise,
    table_source,
    train_dpo,
    train_grpo,
    wait_commands,
    warm_start,
)


def run_demo(
    out: Path, steps: int | None = None, seed: int = 0, use_cache: bool = True, finer: str = "seeing"
) -> dict[str, Path]:
    """Run the whole demo under ``out`` and return where things went (``seed`` seeds the worlds, models and
    training). ``finer``: ``"seeing"``, the FINER half on a base that sees per-instance attributes
    (``miniature.finer_half``, beside the whole ORIC half); or ``"tuples"``, the control: DPO on FINER-Tuning's tuples
    from the ORIC half's base (beside GRPO). ``use_cache``: take the warm-started bases from the shared cache when
    the same inputs made them before."""
    if finer not in FINER_HALVES:
        raise UserError(f"--finer: expected one of {', '.join(FINER_HALVES)}, got {finer!r}")
    from finetune.training import use_cpu_accelerator_without_gpu

    use_cpu_accelerator_without_gpu()  # before anything imports DeepSpeed (its "unable to detect" notice)
    pin_threads()

    out = out if out.is_absolute() else REPO_ROOT / out
    claim_demo_dir(out)
    paths = demo_paths(out)
    STAGE_STATUS.clear()
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def record_stage_time(name: str) -> None:
        nonlocal clock
        timings[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    finer_half_run = None
    if finer == "seeing":  # the long pole: on the second core from the start, beside everything below
        from miniature.finer_half import run_finer_half

        finer_half_run = Background(  # its report is written at the end, beside the table
            "FINER on a base that sees (16 vision tokens, a pretrained frozen tower; DPO on image-contrast pairs)",
            out / "logs" / "finer-seeing.log",
            lambda: run_finer_half(out, seed, report=False, use_cache=use_cache),
        )
    announce_stage(
        "1/7 synthetic world with scene priors (COCO annotations, scene graphs, POPE-random-style questions)"
    )
    build_world(paths, seed)
    record_stage_time("world")

    announce_stage("2/7 tiny models: random-initialised Qwen3-VL (here), tiny CLIP trained on the train split (step 4)")
    build_tiny_qwen(paths, seed)
    record_stage_time("tiny Qwen3-VL")

    # The warm-start keeps one core busy; the tiny CLIP, ORIC's data (it needs the CLIP) and FINER's data are
    # built beside it on the other core, their output in a log
    data = Background(
        "tiny CLIP, ORIC and FINER data" if finer_half_run is None else "tiny CLIP and ORIC data",
        out / "logs" / "data.log",
        lambda: build_data(paths, out, seed, finer=finer_half_run is None),
    )
    announce_stage(
        "3/7 base model: supervised warm-start on conventional data (POPE-random-style questions, plain answers)"
    )
    warm_start(paths, out, seed, use_cache)
    record_stage_time("warm-start")

    finer_data = "; FINER-Tuning tuples (train scene graphs) and FINER-bench (val scene graphs)"
    finer_data = finer_data if finer_half_run is None else ""
    announce_stage(
        "4/7 ORIC training data (train images) and ORIC-Bench (val images): co-occurrence judge, CLIP-guided "
        f"negatives{finer_data}"
    )
    data.join()
    clock = time.monotonic()  # waiting for the data, if at all, is not counted twice
    timings["tiny CLIP, ORIC and FINER data (beside the warm-start)"] = data.seconds

    # DPO and its report (one core, shorter than GRPO) run beside GRPO (one core); GRPO's output stays on the terminal
    dpo = None
    if finer_half_run is None:
        announce_stage(
            "5/7 DPO from the base model on the FINER-Tuning tuples (eval hook: step-0 baseline, then each save)"
        )
        dpo = Background("DPO", out / "logs" / "dpo.log", lambda: train_dpo(paths, seed, report=True))
    announce_stage("6/7 GRPO Visual-RFT from the base model (eval hook: step-0 baseline, then each save)")
    train_grpo(paths, steps, seed)
    record_stage_time("GRPO")
    if finer_half_run is None:
        runs, table, probe = {"grpo": paths["run"], "dpo": paths["dpo"]}, TABLE, paths["finer_yn"]
    else:
        from miniature.finer_half import RUN, finer_half_paths
        from miniature.finer_half import TABLE as FINER_TABLE

        probe = finer_half_paths(out)["probe"]
        runs = {"grpo": paths["run"], RUN: finer_half_paths(out)["dpo"]}
        table = [entry for entry in TABLE if not entry[0].startswith("finer")] + FINER_TABLE
    # The ORIC half's report and before/after rows now, while the FINER half trains: at the end, only the FINER
    # half's are left (the same draws, so the same rows: results_table draws per run and benchmark)
    reports = [start_command(report_command(paths["run"]))]
    oric_entries = [entry for entry in table if table_source(entry) == "grpo"]
    found = dict(zip(oric_entries, results_table(runs, oric_entries)))
    record_stage_time("GRPO's before/after rows (its report beside them)")
    if dpo is not None:
        dpo.join()
        clock = time.monotonic()  # the wait for DPO, if any, is not counted
        timings["DPO and its report (beside GRPO)"] = dpo.seconds
    else:
        announce_stage("5/7 FINER on a base that sees: waiting for the stages run beside the ORIC half")
        finer_half_run.join(progress_every=60)
        record_stage_time("waiting for FINER on a base that sees")
        timings["FINER on a base that sees (beside the ORIC half)"] = finer_half_run.seconds
        # this DPO run's report (train_dpo, in the tuples control, writes its own beside GRPO)
        reports.append(start_command(report_command(runs[RUN])))

    announce_stage("7/7 before/after: the eval hooks' step-0 baselines against the trained models, same items")
    rest = [entry for entry in table if entry not in found]
    found.update(zip(rest, results_table(runs, rest)))
    wait_commands(reports)
    record_stage_time("FINER's rows and the reports")
    summarise(paths, [found[entry] for entry in table], timings, out, runs, probe)
    return paths
