"""The eval hook: after each checkpoint save, evaluate that checkpoint and log the metrics.

Recipes enable it by name (``eval_on_save: true``, ``eval_benchmarks: [oric_bench_r1]``, ``eval_limit``
for quick hooks: a seeded sample stratified over the benchmark's subsets, drawn once with ``eval_limit_seed``
so that every checkpoint answers the same items; ``eval_limit_mode: first`` keeps the first N instead).
``eval_final_benchmarks`` are run once, after the final checkpoint (or, when the last step is not saved, on
the final model at the end of training): the place for long suites such as the ``general`` preset (FINER's
six general-ability benchmarks, Table 3), so that an alignment tax shows up
in the same run. A preset name (:data:`PRESETS`) stands for its benchmarks in either list.

After each save, the live model is evaluated in-process (in eval mode, train mode
restored afterwards) and the results land in ``OUTPUT_DIR/eval/checkpoint-N/<benchmark>/``, the same
files ``veritune eval watch`` writes. The metrics go

- to the trainer's log history and to every ``report_to`` integration (W&B, TensorBoard, MLflow, the
  console), the way the Trainer's own eval metrics do, as ``eval/<benchmark>/<metric>`` at the
  checkpoint's step;
- to the active W&B run, with the per-category tables and a table of sample predictions
  (``wandb.Table``).

Distributed runs: every process takes part; each answers a share of every batch (see
``eval_hooks/runner.py``). Under DeepSpeed ZeRO-3 the weights are sharded, so generation runs on all ranks
in lockstep with ``synced_gpus=True``. A failing benchmark is logged and skipped, and never stops
training (a crash of one rank inside generation would still stall the others, as in any collective).
For long benchmarks, prefer ``veritune eval watch`` as a separate job: training does not wait for it.

Backend (``eval_backend`` in a recipe): on a GRPO run with colocated vLLM rollouts (``use_vllm: true``,
``vllm_mode: colocate``) the hook generates with the trainer's own vLLM engines, after pushing the
training model's current weights into them (``auto``, the default, or ``vllm``): the model is not loaded a
second time and generation is vLLM's. Otherwise it generates with the live training model through
transformers; with ``vllm_mode: server`` it says why (the engine is on another node and serves the
trainers; the hook does not route benchmark prompts through it).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import CallbackHandler

from core.errors import UserError
from core.images import load_image_cached
from core.io import atomic_write_json, require_input_path
from core.run_layout import WANDB_LOGGED_FILE, checkpoint_eval_dir, checkpoint_name
from eval_hooks.coverage import check_images, coverage_text
from eval_hooks.evaluate import evaluate_prepared
from eval_hooks.paths import resolve_paths
from eval_hooks.plan import EvalPlan
from eval_hooks.prepare import PreparedBenchmark
from eval_hooks.registry import get_benchmark

logger = logging.getLogger("veritune.eval")
PARTIAL_KEY = "eval_allow_partial: true"  # the recipe's opt-in to partial scores, named in the hook's errors


def flat_metrics(name: str, result: dict[str, Any]) -> dict[str, float]:
    """``{"eval/<benchmark>/<metric>": value}`` of one benchmark's result, with its coverage beside the metrics
    (``coverage/answered`` and ``coverage/expected`` items, ``coverage/units``: the questions, or pairs, they
    are; ``coverage/answered_share``, ``coverage/missing_images``, ``coverage/unresolved_share``,
    ``coverage/partial``: 1 when only the answered items were scored, and ``coverage/mostly_unresolved``: 1
    when more answers than the limit were unresolved, scored anyway)."""
    flat = {f"eval/{name}/{key}": float(value) for key, value in result["metrics"].items()}
    coverage = result.get("coverage") or {}
    for key in ("answered", "expected", "units", "answered_share", "missing_images", "unresolved_share"):
        if isinstance(coverage.get(key), (int, float)) and not isinstance(coverage.get(key), bool):
            flat[f"eval/{name}/coverage/{key}"] = float(coverage[key])
    if coverage:
        flat[f"eval/{name}/coverage/partial"] = float(bool(result.get("partial")))
        flat[f"eval/{name}/coverage/mostly_unresolved"] = float(bool(result.get("mostly_unresolved")))
    return flat


def wandb_payload(results: dict[str, dict[str, Any]], step: int, wandb: Any, *, scalars: bool = True) -> dict[str, Any]:
    """What one checkpoint's evaluation logs to W&B: the metrics (unless ``scalars=False``), each
    per-category table and a table of sample predictions, at ``train/global_step = step``."""
    payload: dict[str, Any] = {}
    for name, result in results.items():
        if scalars:
            payload.update(flat_metrics(name, result))
        tables = {**result.get("tables", {}), "samples": result.get("samples", [])}
        blind = (result.get("generation") or {}).get("blind")  # a blind control: show the blank the model saw
        fill = tuple(blind["fill"]) if isinstance(blind, dict) and blind.get("fill") else None
        for table_name, rows in tables.items():
            if rows:
                columns = list(dict.fromkeys(key for row in rows for key in row))
                data = [
                    [
                        _image_cell(row.get(column), wandb, blind_fill=fill)
                        if column == "image"
                        else _cell(row.get(column))
                        for column in columns
                    ]
                    for row in rows
                ]
                payload[f"eval/{name}/{table_name}"] = wandb.Table(columns=columns, data=data)
    payload["train/global_step"] = step
    return payload


def _image_cell(path: Any, wandb: Any, size: int = 256, blind_fill: tuple[int, ...] | None = None) -> Any:
    """A ``wandb.Image`` thumbnail (longest side ``size``) of a sample's image, or with ``blind_fill`` of the
    blank a blind control showed in its place; None when it cannot be read."""
    if not path:
        return None
    try:
        from PIL import Image

        if blind_fill is not None:
            image = load_image_cached(path, cache=False, blind_fill=blind_fill)
            caption = f"{Path(path).name} (blind control: blank {','.join(map(str, blind_fill))})"
        else:
            with Image.open(path) as raw:
                image, caption = raw.convert("RGB"), Path(path).name
        image.thumbnail((size, size))
        return wandb.Image(image, caption=caption)
    except (OSError, ValueError):
        return None


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


class EvalHookCallback(TrainerCallback):
    """Evaluate every saved checkpoint on the plan's benchmarks (see the module docstring).

    Args:
        plan: what to evaluate and how (:class:`eval_hooks.plan.EvalPlan`, from the recipe's ``eval_*`` keys:
            :meth:`~eval_hooks.plan.EvalPlan.from_script_args`): ``benchmarks`` per save, each with its
            ``NAME:N`` limit or ``limit`` (a stratified sample drawn with ``limit_seed``, or the first ones:
            ``limit_mode``); ``final_benchmarks`` once, after the final checkpoint (or on the final model when
            training ends without saving its last step); ``at_start``: also the model before the first step
            (the step-0 baseline, in ``eval/checkpoint-0``), on the same items as every later checkpoint;
            ``allow_partial``: score a benchmark whose images are partly missing on the items that have them,
            labelled partial (``eval_allow_partial``; by default such a benchmark stops the run before its
            first step: :meth:`check_benchmarks`). A list of benchmarks instead, with ``data_root`` and the
            settings as keywords (``limit``, ``batch_size``, ``data``, ``image_root``, ``max_new_tokens``,
            ``final_benchmarks``, ``at_start``, ``backend``, ``allow_partial``, ``limit_seed``, ``limit_mode``),
            builds the plan through the same parser (:meth:`~eval_hooks.plan.EvalPlan.for_hook`).

    A checkpoint whose answers are mostly unresolved (above :data:`eval_hooks.coverage.UNRESOLVED_LIMIT`: a
    format not learned yet, a budget too short) is never refused here, unlike ``eval run``: it is scored,
    labelled ``mostly_unresolved`` (``eval/<benchmark>/coverage/mostly_unresolved`` = 1) and warned about.
    """

    def __init__(self, plan: EvalPlan | list[str], data_root: str | Path | None = None, **settings: Any) -> None:
        if not isinstance(plan, EvalPlan):
            plan = EvalPlan.for_hook(plan, data_root, **settings)
        self.plan = plan
        self.benchmarks, self.limits = plan.benchmarks, plan.limits
        self.final_benchmarks, self.final_limits = plan.final_benchmarks, plan.final_limits
        self._final_done = False
        self.at_start = plan.at_start
        self.data_root = plan.data_root
        self.data = plan.data
        self.image_root = plan.image_root
        self.limit, self.limit_seed, self.limit_mode = plan.limit, plan.limit_seed, plan.limit_mode
        self.batch_size = plan.batch_size
        self.max_new_tokens = plan.max_new_tokens
        self.processor: Any = None
        self._prepared: dict[str, PreparedBenchmark] = {}
        self._handler: CallbackHandler | None = None
        self.backend = plan.backend
        self._vllm: Any = None  # TRL's VLLMGeneration of the trainer, when it has one (bind_vllm)
        self._said_backend = False
        self.allow_partial = plan.allow_partial
        self.failed: dict[int, list[str]] = {}  # step -> the benchmarks whose evaluation failed there

    def bind_handler(self, handler: CallbackHandler) -> None:
        """Callbacks get no handle on the Trainer: whoever builds the Trainer passes its CallbackHandler here
        (:func:`finetune.training.bind_callbacks`), through which the eval metrics reach every
        ``report_to`` integration like the Trainer's own logs. Unbound, they go to the log history and W&B."""
        self._handler = handler

    def bind_vllm(self, generation: Any) -> None:
        """The trainer's vLLM generation (TRL's ``trainer.vllm_generation``, None without ``use_vllm``), whose
        colocated engine the hook reuses (:meth:`make_backend`)."""
        self._vllm = generation

    def make_backend(self, model: Any, processor: Any, out_dir: Path, step: int) -> Any:
        """The backend of one evaluation: the trainer's colocated vLLM engine (``auto`` or ``vllm``, when there
        is one), else the live model through transformers; the choice, and why, is logged once."""
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

        from eval_hooks.runner import ColocatedVLLMBackend, TransformersBackend

        name = f"{out_dir.parent.parent.name}/{checkpoint_name(step)}"
        path = out_dir.parent.parent / checkpoint_name(step)
        mode = getattr(self._vllm, "mode", None)
        if self.backend != "transformers" and mode == "colocate":
            self._say("the trainer's colocated vLLM engine (weights pushed from the training model first)")
            parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
            dtype = str(parameter.dtype).removeprefix("torch.") if parameter is not None else None
            return ColocatedVLLMBackend(self._vllm, processor, model_name=name, model_path=path, dtype=dtype)
        if self.backend == "vllm":  # the recipe check refuses this before training; a trainer built by hand
            self._say(f"transformers: eval_backend vllm asked, but the trainer has no colocated vLLM engine ({mode})")
        elif mode == "server":
            self._say(
                "transformers: the vLLM engine is a server on another node, busy with the trainers' rollouts; the "
                "hook generates with the live training model"
            )
        else:
            self._say("transformers (the live training model)")
        return TransformersBackend(
            model, processor, synced_gpus=is_deepspeed_zero3_enabled(), model_name=name, model_path=path
        )

    def _say(self, choice: str) -> None:
        if not self._said_backend:
            logger.info("eval hook: generating with %s", choice)
            self._said_backend = True

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.processor = kwargs.get("processing_class")
        self.check_benchmarks(state.is_world_process_zero)
        self.evaluate_baseline(args, state, control, kwargs.get("model"))

    def check_data(self) -> None:
        """Before any model loads (the entry scripts' first step, :func:`finetune.training.start_run`): the hook's
        folders and every ``eval_data`` file exist, and every benchmark evaluated per save has its files where the
        hook will read them (its layout under ``eval_data_root``: :func:`eval_hooks.paths.resolve_paths`), so
        that a wrong path stops the run in seconds instead of failing each evaluation after the model and DeepSpeed
        have loaded. A final benchmark without files under ``eval_data_root`` is left to :meth:`check_benchmarks`
        (reported, then skipped at the end: the FINER recipes name the ``general`` suites, which a run may lack).
        What the files hold, and their images, is checked before the first step (:meth:`check_benchmarks`).

        Raises:
            UserError: one line naming the recipe key, the benchmark and the path.
        """
        if self.data_root is not None:
            require_input_path("eval_data_root", self.data_root, "dir")
        if self.image_root is not None:
            require_input_path("eval_image_root", self.image_root, "dir")
        for name, path in self.data.items():
            require_input_path(f"eval_data: {name}", path)
        for name in self.benchmarks:
            if name in self.data:
                continue
            layout = get_benchmark(name).data_layout or "the benchmark's file"
            if self.data_root is None:
                raise UserError(
                    f"eval_benchmarks: {name}: its files are read under eval_data_root (as {layout}) or from "
                    f"eval_data: [{name}=PATH], and the recipe sets neither"
                )
            data_path, _ = resolve_paths(name, self.data_root, self.data, self.plan.image_roots)
            if not data_path.exists():
                raise UserError(
                    f"eval_data_root: {name}: {data_path}: no such file or directory (expected {layout}); or give "
                    f"eval_data: [{name}=PATH]"
                )

    def check_benchmarks(self, main_process: bool = True) -> None:
        """Before the first step: load every benchmark of the hook (per save and final) and check its images, so
        that a wrong ``eval_image_root`` stops the run in seconds with one ``error:`` line instead of drawing
        zeros at every save (``eval_allow_partial``: a warning, and partial scores). A benchmark that cannot be
        loaded is said now (it fails, logged, when its turn comes, and training goes on); the entry scripts
        refuse a per-save benchmark's missing files earlier, before the model loads (:meth:`check_data`).

        Raises:
            UserError: a benchmark's images are missing (some, without ``allow_partial``; all, in any case).
        """
        for name, limit in [
            *((name, self.limits.get(name, self.limit)) for name in self.benchmarks),
            *((name, self.final_limits.get(name, self.limit)) for name in self.final_benchmarks),
        ]:
            try:
                prepared = self.prepared(name, limit)
            except UserError as err:
                if main_process:
                    final = name in self.final_benchmarks and name not in self.benchmarks
                    logger.warning(
                        "eval hook: %sbenchmark %s cannot run as configured (%s): %s",
                        "final " if final else "",
                        name,
                        "it will be skipped at the end" if final else "each evaluation of it will fail",
                        err,
                    )
                continue
            check_images([prepared], opt_in=PARTIAL_KEY, where="eval_image_root, eval_data_root, eval_data")

    def prepared(self, name: str, limit: int | None) -> PreparedBenchmark:
        """Benchmark ``name`` with ``limit``, loaded once for the whole run (every checkpoint sees the same items)."""
        key = f"{name}:{limit}"  # a benchmark may run per save and, with another limit, at the end
        if key not in self._prepared:
            # never refused here (the plan's allow_unresolved): a checkpoint whose answers are mostly unresolved
            # (a format not learned yet, a budget too short) is a point of the curve, scored, labelled and warned
            self._prepared[key] = self.plan.prepare(name, limit)
        return self._prepared[key]

    def evaluate_baseline(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any
    ) -> None:
        """The step-0 baseline: with ``at_start``, evaluate the untrained model once, before the first step.
        A resumed run (global step above 0) skips it; answers already in ``eval/checkpoint-0`` are reused."""
        out_dir = checkpoint_eval_dir(args.output_dir, 0)
        if not self.at_start or state.global_step > 0:
            return
        results = self.evaluate_model(model, self.processor, out_dir, 0)
        if (results or self.failed.get(state.global_step)) and state.is_world_process_zero:
            self.log_results(args, state, control, results)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        model = kwargs.get("model")
        processor = kwargs.get("processing_class") or self.processor
        step = state.global_step
        out_dir = checkpoint_eval_dir(args.output_dir, step)
        results = self.evaluate_model(model, processor, out_dir, step) if self.benchmarks else {}
        if self.final_benchmarks and state.max_steps and step >= state.max_steps:  # the final checkpoint
            self._final_done = True
            results.update(
                self.evaluate_model(model, processor, out_dir, step, self.final_benchmarks, self.final_limits)
            )
        if (results or self.failed.get(state.global_step)) and state.is_world_process_zero:
            self.log_results(args, state, control, results)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # The last step was not saved as a checkpoint: the final benchmarks run on the final model instead.
        if not self.final_benchmarks or self._final_done:
            return
        self._final_done = True
        step = state.global_step
        processor = kwargs.get("processing_class") or self.processor
        out_dir = checkpoint_eval_dir(args.output_dir, step)
        results = self.evaluate_model(
            kwargs.get("model"), processor, out_dir, step, self.final_benchmarks, self.final_limits
        )
        if (results or self.failed.get(state.global_step)) and state.is_world_process_zero:
            self.log_results(args, state, control, results)

    def evaluate_model(
        self,
        model: Any,
        processor: Any,
        out_dir: Path,
        step: int,
        names: list[str] | None = None,
        limits: dict[str, int] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Evaluate the live model on each benchmark (default: the per-save ones; every process calls
        this); ``{name: result}`` on the main process. A benchmark that fails is logged and left out."""
        names, limits = (self.benchmarks, self.limits) if names is None else (names, limits or {})
        if model is None or processor is None:
            logger.error("eval hook at step %d: the trainer passed no model or processor; skipped", step)
            return {}
        backend = self.make_backend(model, processor, out_dir, step)
        results: dict[str, dict[str, Any]] = {}
        was_training = model.training
        model.eval()
        try:
            engaged = backend.engaged() if hasattr(backend, "engaged") else contextlib.nullcontext()
            with engaged:
                self._evaluate_each(backend, names, limits, out_dir, step, results)
        finally:
            model.train(was_training)
        return results

    def _evaluate_each(
        self,
        backend: Any,
        names: list[str],
        limits: dict[str, int],
        out_dir: Path,
        step: int,
        results: dict[str, dict[str, Any]],
    ) -> None:
        """Each benchmark in turn into ``results``; one that fails is logged and left out."""
        for name in names:
            try:
                prepared = self.prepared(name, limits.get(name, self.limit))
                result = evaluate_prepared(backend, prepared, out_dir, batch_size=self.batch_size, opt_in=PARTIAL_KEY)
            except Exception as err:  # noqa: BLE001 - an eval failure must never stop training
                logger.error(
                    "eval hook: %s failed at step %d (training continues): %s: %s",
                    name,
                    step,
                    type(err).__name__,
                    err,
                )
                self.failed.setdefault(step, []).append(name)
                continue
            if result:
                results[name] = result

    def log_results(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, results: dict[str, dict[str, Any]]
    ) -> None:
        """Log to the log history, every ``report_to`` integration and W&B (main process only). A benchmark whose
        evaluation failed at this step is logged as ``eval/<benchmark>/status/failed`` = 1, never as a score."""
        metrics = {key: value for name, result in results.items() for key, value in flat_metrics(name, result).items()}
        failed = self.failed.pop(state.global_step, [])  # logged once
        metrics.update({f"eval/{name}/status/failed": 1.0 for name in failed})
        state.log_history.append({**metrics, "step": state.global_step})
        via_trainer = False
        if self._handler is not None:
            # "eval_x" is how integrations recognise eval metrics: they log it as "eval/x" (W&B, TensorBoard).
            logs = {f"eval_{key.removeprefix('eval/')}": value for key, value in metrics.items()}
            others = [cb for cb in self._handler.callbacks if cb is not self]
            via_trainer = any(type(cb).__name__ == "WandbCallback" for cb in others)
            for callback in others:
                try:
                    callback.on_log(args, state, control, logs=dict(logs), model=self._handler.model)
                except Exception as err:  # noqa: BLE001 - a reporting failure must not stop training either
                    logger.error("eval hook: %s could not log the metrics: %s", type(callback).__name__, err)
        try:
            import wandb
        except ImportError:
            wandb = None
        if wandb is not None and wandb.run is not None:
            payload = wandb_payload(results, state.global_step, wandb, scalars=not via_trainer)
            if not via_trainer:
                payload.update({f"eval/{name}/status/failed": 1.0 for name in failed})
            wandb.run.log(payload)
        if results and wandb is not None and wandb.run is not None:
            # `eval watch` reads this: the checkpoint's metrics are on the dashboard, nothing to log again
            atomic_write_json(
                checkpoint_eval_dir(args.output_dir, state.global_step) / WANDB_LOGGED_FILE,
                {"run": wandb.run.id, "step": state.global_step, "by": "eval hook"},
            )
        summary = "; ".join(
            f"{key}={value:.2f}"
            for key, value in metrics.items()
            if (key.count("/") == 2 or "/macro/" in key) and not key.endswith("/status/failed")
        )
        marks = [
            f"{name} partial ({coverage_text(r['coverage'])} answered)"
            for name, r in results.items()
            if r.get("partial")
        ]
        marks += [
            f"{name} MOSTLY UNRESOLVED ({r['coverage']['unresolved_share']:.0f}% of answers unread: its metrics "
            "describe the answer format)"
            for name, r in results.items()
            if r.get("mostly_unresolved")
        ]
        marks += [f"{name} FAILED" for name in failed]
        logger.info(
            "eval at step %d: %s", state.global_step, "; ".join([summary, *marks]) if summary else "; ".join(marks)
        )
