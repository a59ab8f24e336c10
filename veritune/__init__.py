"""veritune: reinforcement and preference fine-tuning against VLM hallucination.

The ``veritune`` package is the top layer of the framework (docs/ARCHITECTURE.md): the command line
(:mod:`veritune.cli`) and what only it wires (demo commands, the run report, launch, Slurm submission), which
import every folder below. The ground is ``core/``; rewards live in ``rewards/``, data builders in
``data_builders/``, benchmarks in ``eval_hooks/``, training in ``finetune/`` and the CPU miniature in
``miniature/``.
"""

__version__ = "0.1.0"

import core  # noqa: F401  (hides transformers' W&B offline banner in every veritune process)
