"""finetune/grpo.py with a trainer that records its rollout rounds and optimizer steps (tests/test_grpo_rollout.py).

    python tests/rollout_probe.py RECORD.json [--same-completions ROWS] RECIPE.yaml [--key value ...]

RECORD.json gets ``rounds`` (each training ``generate`` round: the global step it ran at and its rows'
question ids) and ``micro`` (each micro-step: the global step it belongs to and its completion count), and
``step1.pt`` beside it the trainable weights after the first optimizer update.

``--same-completions ROWS`` makes two runs that differ only in their rollout round train their first optimizer
step on the same completions: generation runs in chunks of ROWS rows (one optimizer step's), each seeded by its
index in the run, so a chunk's samples do not depend on how many chunks a ``generate`` call holds; and TRL's
shuffle of a round's completions before it cuts them into micro-batches is turned off, so the first optimizer
step takes the first chunk's rows in both runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import trl.trainer.grpo_trainer as trl_grpo
from transformers import TrainerCallback

import finetune.grpo as grpo_entry
from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.grpo_trainer import DynamicSamplingMixin, VerituneGRPOTrainer
from finetune.recipe import run_entry_script

RECORD: dict[str, list[Any]] = {"rounds": [], "micro": []}
RECORD_PATH = Path("rollout_record.json")
CHUNK_ROWS = 0  # --same-completions ROWS; 0: generation and TRL's shuffle untouched


class SaveFirstUpdate(TrainerCallback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.global_step == 1:
            weights = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
            torch.save(weights, self.path)


class ProbeTrainer(VerituneGRPOTrainer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe_chunks = 0
        self.add_callback(SaveFirstUpdate(RECORD_PATH.with_name("step1.pt")))

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.model.training:
            RECORD["rounds"].append({"step": self.state.global_step, "ids": [str(row["id"]) for row in inputs]})
        return super()._generate_and_score_completions(inputs)

    def _generate(self, prompts: list[Any]) -> tuple[Any, ...]:
        if not CHUNK_ROWS:
            return super()._generate(prompts)
        parts = []
        for start in range(0, len(prompts), CHUNK_ROWS):
            torch.manual_seed(1000 + self._probe_chunks)
            self._probe_chunks += 1
            parts.append(SimpleNamespace(generated=super()._generate(prompts[start : start + CHUNK_ROWS])))
        rows = [list(range(len(part.generated[0]))) for part in parts]
        return DynamicSamplingMixin._dynamic_join(parts, rows)  # type: ignore[arg-type]

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            RECORD["micro"].append(
                {"step": self.state.global_step, "completions": int(inputs["completion_ids"].shape[0])}
            )
        return inputs


def main() -> None:
    global CHUNK_ROWS, RECORD_PATH
    RECORD_PATH = Path(sys.argv.pop(1))
    if sys.argv[1] == "--same-completions":
        CHUNK_ROWS = int(sys.argv[2])
        del sys.argv[1:3]
        trl_grpo.shuffle_sequence_dict = lambda batch: batch
    grpo_entry.VerituneGRPOTrainer = ProbeTrainer
    try:
        run_entry_script(grpo_entry.main, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    finally:
        RECORD_PATH.write_text(json.dumps(RECORD))


if __name__ == "__main__":
    main()
