"""Training entry points (``grpo.py``, ``dpo.py``) and what they share: recipe parsing, model loading and
dataset preparation. No training loop lives here: TRL's trainers do the optimisation."""
