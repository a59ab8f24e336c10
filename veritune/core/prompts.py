"""Prompt text shared by the training data (``finetune/``, ``data_builders/``) and the benchmarks (``eval_hooks/``)."""

# The R1-style instruction of ORIC training (seed Fig. 11), reproduced verbatim from the public ORIC release.
R1_INSTRUCTION = (
    "Please first provide your reasoning or working out on how you would go about solving the question between "
    "<REASONING> and </REASONING> and then your final answer between <SOLUTION> and (put yes or no here) </SOLUTION>."
)
