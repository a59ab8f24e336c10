"""ORIC rewards: every case of the format and accuracy rules, in both completion layouts."""

from __future__ import annotations

import random

import pytest

from rewards import REWARD_FUNCS, UnknownRewardError, accuracy_reward, format_reward, get_reward_funcs

GOOD = "<REASONING>I see a cat on the sofa.</REASONING><SOLUTION>yes</SOLUTION>"


def conversational(text: object) -> list[dict[str, object]]:
    return [{"role": "assistant", "content": text}]


# ---- format


@pytest.mark.parametrize(
    "completion",
    [
        GOOD,
        "  <REASONING>a</REASONING>\n\n<SOLUTION>no</SOLUTION>\n",
        "<REASONING>\nstep 1\nstep 2\n</REASONING> <SOLUTION> Yes. </SOLUTION>",
    ],
)
def test_format_accepts_one_reasoning_then_one_solution(completion: str) -> None:
    assert format_reward([completion]) == [1.0]


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ("<SOLUTION>yes</SOLUTION>", "no reasoning block"),
        ("<REASONING>x</REASONING>", "no solution block"),
        ("<REASONING>   </REASONING><SOLUTION>yes</SOLUTION>", "empty reasoning"),
        ("<SOLUTION>yes</SOLUTION><REASONING>x</REASONING>", "wrong order"),
        ("<REASONING>x</REASONING><SOLUTION>yes</SOLUTION><SOLUTION>no</SOLUTION>", "two solution blocks"),
        ("<REASONING>x</REASONING><REASONING>y</REASONING><SOLUTION>yes</SOLUTION>", "two reasoning blocks"),
        ("Sure! <REASONING>x</REASONING><SOLUTION>yes</SOLUTION>", "text before"),
        ("<REASONING>x</REASONING><SOLUTION>yes</SOLUTION> Done.", "text after"),
        ("<REASONING>x</REASONING>between<SOLUTION>yes</SOLUTION>", "text between"),
        ("<REASONING>x<SOLUTION>yes</SOLUTION>", "unbalanced reasoning"),
        ("<REASONING>x</REASONING><SOLUTION>yes", "unbalanced solution"),
        ("<reasoning>x</reasoning><solution>yes</solution>", "lower-case tags"),
        ("<REASONING>x <SOLUTION>no</SOLUTION></REASONING><SOLUTION>yes</SOLUTION>", "nested tags"),
    ],
)
def test_format_rejects(completion: str, why: str) -> None:
    assert format_reward([completion]) == [0.0], why


def test_format_accepts_conversational_completions() -> None:
    assert format_reward([conversational(GOOD), conversational("yes")]) == [1.0, 0.0]


def test_format_reads_typed_content_parts() -> None:
    completion = [{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}]
    assert format_reward([completion]) == [1.0]


# ---- accuracy


@pytest.mark.parametrize(
    ("answer", "solution"),
    [
        ("yes", "yes"),
        ("Yes", "yes"),
        (" YES ", "yes"),
        ("yes.", "yes"),
        ("No.", "no"),
        ("\n no \n", "no"),
        ("yes", "<SOLUTION>yes</SOLUTION>"),
        ("no", "<SOLUTION>No</SOLUTION>"),
        ("yes", "Yes"),
    ],
)
def test_accuracy_correct_answers(answer: str, solution: str) -> None:
    completion = f"<REASONING>r</REASONING><SOLUTION>{answer}</SOLUTION>"
    assert accuracy_reward([completion], [solution]) == [1.0]


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ("<REASONING>r</REASONING><SOLUTION>no</SOLUTION>", "wrong answer"),
        ("yes", "no block"),
        ("<REASONING>r</REASONING>", "no block after reasoning"),
        ("<SOLUTION>yes</SOLUTION><SOLUTION>yes</SOLUTION>", "several blocks"),
        ("<SOLUTION></SOLUTION>", "empty block"),
        ("<SOLUTION>   </SOLUTION>", "blank block"),
        ("<SOLUTION>yes or no</SOLUTION>", "both words"),
        ("<SOLUTION>no or yes</SOLUTION>", "both words, reversed"),
        ("<SOLUTION>yes, no</SOLUTION>", "both words, comma"),
        ("<SOLUTION>Yes, there is a cat.</SOLUTION>", "other text"),
        ("<SOLUTION>yess</SOLUTION>", "misspelt"),
        ("<SOLUTION>yes..</SOLUTION>", "two periods"),
        ("<SOLUTION>y</SOLUTION>", "abbreviation"),
        ("<SOLUTION>yes", "unclosed block"),
    ],
)
def test_accuracy_wrong_or_unparsable(completion: str, why: str) -> None:
    assert accuracy_reward([completion], ["yes"]) == [0.0], why


def test_accuracy_yes_or_no_is_not_correct_for_no() -> None:
    # Restating the options is no answer, though the block contains "no" (a substring parser credits it).
    assert accuracy_reward(["<SOLUTION>yes or no</SOLUTION>"], ["no"]) == [0.0]


def test_accuracy_capitalised_yes_is_correct_for_yes() -> None:
    # Case does not matter (a case-sensitive parser would mark it wrong).
    assert accuracy_reward(["<SOLUTION>Yes</SOLUTION>"], ["yes"]) == [1.0]


def test_accuracy_unverifiable_label_gives_none() -> None:
    assert accuracy_reward(["<SOLUTION>yes</SOLUTION>"], ["maybe"]) == [None]


def test_accuracy_conversational_and_batch_order() -> None:
    completions = [conversational("<SOLUTION>no</SOLUTION>"), conversational("<SOLUTION>yes</SOLUTION>")]
    assert accuracy_reward(completions, ["no", "no"]) == [1.0, 0.0]


def test_oric_reward_is_accuracy_plus_format() -> None:
    completions = [GOOD, "<SOLUTION>yes</SOLUTION>", "<REASONING>r</REASONING><SOLUTION>no</SOLUTION>", "junk"]
    solutions = ["yes", "yes", "yes", "yes"]
    total = [a + f for a, f in zip(accuracy_reward(completions, solutions), format_reward(completions))]
    assert total == [2.0, 1.0, 1.0, 0.0]


# ---- robustness


@pytest.mark.parametrize(
    "completion",
    [
        None,
        42,
        3.5,
        b"<SOLUTION>yes</SOLUTION>",
        {"role": "assistant"},
        [],
        [{"role": "assistant", "content": None}],
        [{"role": "assistant", "content": [{"type": "image"}]}],
        "<REASONING>" * 100_000,
        "<SOLUTION>" + "yes " * 300_000 + "</SOLUTION>",
        "<REASONING>😺 ünïcödé</REASONING><SOLUTION>yes</SOLUTION>",
        "</SOLUTION><SOLUTION>",
    ],
)
def test_rewards_never_raise(completion: object) -> None:
    assert format_reward([completion]) in ([0.0], [1.0])
    assert accuracy_reward([completion], ["yes"]) in ([0.0], [1.0])


def test_megabyte_completion_scores_zero() -> None:
    # No generation budget produces a megabyte; such input is garbage and is not scanned to its end.
    completion = "<REASONING>" + "x" * 1_000_000 + "</REASONING><SOLUTION>yes</SOLUTION>"
    assert format_reward([completion]) == [0.0]
    assert accuracy_reward([completion], ["yes"]) == [0.0]


def test_randomised_completions_never_raise() -> None:
    rng = random.Random(1234)
    pieces = [
        "<REASONING>",
        "</REASONING>",
        "<SOLUTION>",
        "</SOLUTION>",
        "yes",
        "no",
        " ",
        ".",
        "\n",
        "Yes",
        "é",
        "<",
        ">",
    ]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        completion = conversational(text) if rng.random() < 0.5 else text
        for score in format_reward([completion]) + accuracy_reward([completion], [rng.choice(["yes", "no"])]):
            assert score in (0.0, 1.0)


# ---- plain answers


def test_plain_accuracy_reads_answers_as_oric_bench_plain_does() -> None:
    from eval_hooks.benchmarks.oric_bench import OricBench
    from rewards import plain_accuracy_reward
    from rewards.graders import extract_yes_no

    answers = ["Yes.", "No, there is not.", "yes or no", "There is no cat.", "", None, "<SOLUTION>no</SOLUTION>"]
    truths = ["yes", "no", "yes", "no", "no", "yes", "<SOLUTION>no</SOLUTION>"]
    rewards = plain_accuracy_reward([conversational(a) for a in answers], truths)
    assert rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    # the grader of the benchmark the miniature evaluates with (one grader per answer format)
    assert OricBench.grader is extract_yes_no
    assert plain_accuracy_reward(["Yes."], ["maybe"]) == [None]  # an unverifiable label is not rewarded


# ---- registry


def test_registry_resolves_names_in_order() -> None:
    assert get_reward_funcs(["format", "accuracy"]) == [format_reward, accuracy_reward]
    assert set(REWARD_FUNCS) >= {"accuracy", "format", "plain_accuracy"}


def test_registry_dotted_path_fallback() -> None:
    assert get_reward_funcs(["rewards.oric.format_reward"]) == [format_reward]


@pytest.mark.parametrize("name", ["acuracy", "rewards.oric.nope", "no_such_module.func"])
def test_registry_unknown_name(name: str) -> None:
    with pytest.raises(UnknownRewardError):
        get_reward_funcs([name])
