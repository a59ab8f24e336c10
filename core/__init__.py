"""The ground: what every other folder shares and that imports nothing above it.

- :mod:`core.errors`: ``UserError`` and one-line reporting of bad input;
- :mod:`core.io`: reading user files, atomic writes, manifests;
- :mod:`core.images`: opening images (scaled to a pixel budget, or cached for evaluation);
- :mod:`core.run_layout`: the files of a training run directory (``checkpoint-N``, the W&B
  run-id file, ``eval/checkpoint-N/``) and when a checkpoint is complete;
- :mod:`core.registry`: the ``module:attribute`` fallback of the name registries;
- :mod:`core.prompts`: prompt text shared by training data and benchmarks;
- :mod:`core.llm_client`: the cached OpenAI-compatible chat client;
- :mod:`core.hub`: model-source checks (local path or Hugging Face Hub).
- :mod:`core.sampling`: the seeded uniform subsample of ``max_train_samples``.
- :mod:`core.quiet`: third-party console lines that tell a veritune user nothing, kept off the console.
"""

from core.quiet import hide_wandb_offline_banner

hide_wandb_offline_banner()  # every framework process: transformers' banner says nothing the user set up
