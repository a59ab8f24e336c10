"""The R1-style answer format of ORIC's Visual-RFT training ("ORIC: Benchmarking Object Recognition under
Contextual Incongruity in Large Vision-Language Models", Fig. 11; docs/REFERENCES.md), in one place:
the instruction that asks for it, the prompt built with it, and the check that an answer has its shape.
Shared by the training data (``finetune/``, ``data_builders/``), the rewards and the benchmarks."""

from __future__ import annotations

import re

# The R1-style instruction of ORIC training (Fig. 11), reproduced verbatim from the public ORIC release.
R1_INSTRUCTION = (
    "Please first provide your reasoning or working out on how you would go about solving the question between "
    "<REASONING> and </REASONING> and then your final answer between <SOLUTION> and (put yes or no here) </SOLUTION>."
)

# The same instruction for a multiple-choice question (MIOH-format training rows, "Fine-Grained Multi-Image Object
# Hallucination Benchmark", Sec. 3: questions answered by a letter): only the answer it asks for differs.
R1_OPTION_INSTRUCTION = R1_INSTRUCTION.replace("(put yes or no here)", "(put the option's letter here)")

# Scanning megabyte-long completions with regular expressions is cheap, but there is no reason to look
# beyond what a model could sensibly emit as an answer (every answer parser stops here).
MAX_SCAN_CHARS = 200_000

SOLUTION_BLOCK = re.compile(r"<SOLUTION>(.*?)</SOLUTION>", re.DOTALL | re.IGNORECASE)
SOLUTION_TAG = re.compile(r"</?SOLUTION>", re.IGNORECASE)
_REASONING_THEN_SOLUTION = re.compile(
    r"\A\s*<REASONING>(?P<reasoning>.*?)</REASONING>\s*<SOLUTION>(?P<solution>.*?)</SOLUTION>\s*\Z",
    re.DOTALL,
)
_ANY_TAG = re.compile(r"</?(?:REASONING|SOLUTION)>")


def with_r1_instruction(question: str, instruction: str = R1_INSTRUCTION) -> str:
    """The question followed by the R1 instruction: the prompt of ORIC's training file and of ORIC-Bench R1
    (``instruction``: :data:`R1_OPTION_INSTRUCTION` for a multiple-choice question).

    >>> with_r1_instruction("Is there a cat?")[:40]
    'Is there a cat? Please first provide you'
    """
    return f"{question} {instruction}"


def solution_blocks(text: str) -> list[str]:
    """Return the contents of every ``<SOLUTION>...</SOLUTION>`` block in ``text`` (tags any case)."""
    return SOLUTION_BLOCK.findall(text[:MAX_SCAN_CHARS])


def has_r1_format(text: str | None) -> bool:
    """True when ``text`` is exactly one non-empty ``<REASONING>`` block followed by exactly one
    ``<SOLUTION>`` block, with nothing but whitespace around them (the format reward's check).

    >>> has_r1_format("<REASONING>a cat</REASONING> <SOLUTION>yes</SOLUTION>")
    True
    >>> has_r1_format("<SOLUTION>yes</SOLUTION>")
    False
    """
    if text is None or len(text) > MAX_SCAN_CHARS:
        return False
    match = _REASONING_THEN_SOLUTION.match(text)
    if match is None:
        return False
    reasoning, solution = match.group("reasoning"), match.group("solution")
    if not reasoning.strip():
        return False
    # A nested or repeated tag inside either block means the layout is not "exactly one of each".
    return not (_ANY_TAG.search(reasoning) or _ANY_TAG.search(solution))
