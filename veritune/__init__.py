"""veritune: reinforcement and preference fine-tuning against VLM hallucination.

The ``veritune`` package holds the bottom and the top layer of the framework (docs/ARCHITECTURE.md):
:mod:`veritune.core` (errors, atomic I/O, images, run-directory layout, registries, the LLM client), which
every other package imports, and the command line (:mod:`veritune.cli`), the demo, Slurm submission and the
tiny offline models (:mod:`veritune.tiny`), which import the rest. Training lives in ``finetune/``, rewards
in ``rewards/``, data builders in ``data_builders/`` and benchmarks in ``eval_hooks/``.
"""

__version__ = "0.1.0"

from veritune.core.quiet import hide_wandb_offline_banner

hide_wandb_offline_banner()  # every veritune process: transformers' banner says nothing the user set up
