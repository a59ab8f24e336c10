"""V* Bench (191 high-resolution images: 115 attribute and 76 spatial questions) from VLMEvalKit's
``VStarBench.tsv`` (MCQ layout; ``category`` names the sub-task: ``direct_attributes`` or
``relative_position``).

Prompt: VLMEvalKit's MCQ prompt, word for word (``ImageMCQDataset.build_prompt``). Scoring: the option
letter from the shared option grader, accuracy overall and per sub-task, also reported under the paper's
names ``attribute/accuracy`` and ``spatial/accuracy``. The official ``vstar_bench_eval.py``
(penghao-wu/vstar) ranks the options by likelihood instead of generating; FINER reports V* through
VLMEvalKit, which generates, as here.
"""

from __future__ import annotations

from typing import Any

from eval_hooks.base import EvalItem
from eval_hooks.benchmarks.mcq_tsv import McqTsv

SUBTASKS = {"direct_attributes": "attribute", "relative_position": "spatial"}


class VStar(McqTsv):
    name = "vstar"
    data_layout = "VStarBench.tsv (VLMEvalKit layout) under the data root"
    file_name = "VStarBench.tsv"
    vlmeval_prompt = True

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        result = super().score(items, predictions)
        for category, alias in SUBTASKS.items():
            if f"category/{category}" in result["metrics"]:
                result["metrics"][f"{alias}/accuracy"] = result["metrics"][f"category/{category}"]
        return result
