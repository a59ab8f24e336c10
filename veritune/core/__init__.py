"""The bottom layer: what every other package shares and that imports nothing of veritune above it.

- :mod:`veritune.core.errors`: ``UserError`` and one-line reporting of bad input;
- :mod:`veritune.core.io`: reading user files, atomic writes, manifests;
- :mod:`veritune.core.images`: opening images (scaled to a pixel budget, or cached for evaluation);
- :mod:`veritune.core.run_layout`: the files of a training run directory (``checkpoint-N``, the W&B
  run-id file, ``eval/checkpoint-N/``) and when a checkpoint is complete;
- :mod:`veritune.core.registry`: the ``module:attribute`` fallback of the name registries;
- :mod:`veritune.core.prompts`: prompt text shared by training data and benchmarks;
- :mod:`veritune.core.llm_client`: the cached OpenAI-compatible chat client;
- :mod:`veritune.core.hub`: model-source checks (local path or Hugging Face Hub).
- :mod:`veritune.core.sampling`: the seeded uniform subsample of ``max_train_samples``.
- :mod:`veritune.core.quiet`: third-party console lines that tell a veritune user nothing, kept off the console.
"""
