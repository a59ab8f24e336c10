"""Training entry points (``grpo.py``, ``dpo.py``) and what they share: recipe parsing, model loading and
dataset preparation. No training loop lives here: TRL's trainers do the optimisation."""

from core.quiet import hide_wandb_offline_banner

hide_wandb_offline_banner()  # the entry scripts import transformers before veritune itself
