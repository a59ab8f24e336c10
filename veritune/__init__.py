"""veritune: reinforcement and preference fine-tuning against VLM hallucination.

The ``veritune`` package holds what every part of the framework shares: the command line
(:mod:`veritune.cli`), user-facing errors (:mod:`veritune.errors`), crash-safe file writing
(:mod:`veritune.io`) and the tiny offline models used by the demo and the tests
(:mod:`veritune.tiny_models`). Training lives in ``finetune/``, rewards in ``rewards/``, data builders
in ``data_builders/`` and benchmarks in ``eval_hooks/``.
"""

__version__ = "0.1.0"
