"""MIOH's question templates and option layouts ("Fine-Grained Multi-Image Object Hallucination Benchmark").

:data:`TEMPLATES` holds the 26 question types of MIOH's Table 1 ("MIOH Question Type Taxonomy") word for word, in
the table's order, with the option layout each is asked with (Fig. 2 and Sec. C):

- ``yes_some_none``: "A) Yes, all of them B) Yes, in some C) No, in none D) I don't know" (Fig. 2, Hard Negative),
  for the yes/no-style comprehensive questions; "I don't know" is never the answer.
- ``choices``: four lettered candidates (objects, attribute-object pairs, relations or numbers) and
  "E) None of the above" (Fig. 2, Easy; App. A.3).
- ``images``: "Image 1" ... "Image N" and "None of the above" (Fig. 2, Counting - Selective).
- ``images_only``: "Image 1" ... "Image N" (the most/least comparison always has one answer).

The only text filled in beyond the placeholders: "most/least" becomes "most" or "least".
"""

from __future__ import annotations

from dataclasses import dataclass

NONE_OF_THE_ABOVE = "None of the above"
YES_SOME_NONE = ("Yes, all of them", "Yes, in some", "No, in none", "I don't know")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CHOICES = 4  # candidates before "None of the above" (Fig. 2)


@dataclass(frozen=True)
class Template:
    """One question type of Table 1: its task, reasoning pattern, text, option layout and what it asks.

    ``rule`` names the construction in :mod:`data_builders.mioh.build`: ``any`` / ``all`` (yes/some/none),
    ``which_any`` / ``which_all`` / ``first_not_second`` (choices), ``select`` (images), ``two_images`` (the
    two-image comparisons), ``total``, ``appears_count``, ``image_count``, ``select_count``, ``most_least``.
    """

    number: int
    task: str
    pattern: str
    text: str
    layout: str
    rule: str


_TABLE_1 = (
    ("existence", "comprehensive", "Is there at least one {object} in any of these images?", "yes_some_none", "any"),
    ("existence", "comprehensive", "Is a {object} present in all of these images?", "yes_some_none", "all"),
    ("existence", "comprehensive", "Which object appears in at least one image?", "choices", "which_any"),
    ("existence", "comprehensive", "Which object appears in all images?", "choices", "which_all"),
    ("existence", "selective", "In which image does a {object} appear?", "images", "select"),
    ("existence", "comparative", "Which of the two images contains a {object}?", "images", "two_images"),
    ("existence", "comparative", "Which object is in Image 1 but not Image 2?", "choices", "first_not_second"),
    ("attribute", "comprehensive", "Is a “{attribute} {object}” present in any image?", "yes_some_none", "any"),
    ("attribute", "comprehensive", "Is a “{attribute} {object}” present in all images?", "yes_some_none", "all"),
    ("attribute", "comprehensive", "Which attribute-object pair appears in one image?", "choices", "which_any"),
    ("attribute", "comprehensive", "Which attribute-object pair appears in all images?", "choices", "which_all"),
    ("attribute", "selective", "In which image is “{attribute} {object}” found?", "images", "select"),
    ("attribute", "comparative", "Which of the two images “{attribute} {object}” present?", "images", "two_images"),
    (
        "attribute",
        "comparative",
        "Which attribute-object pair is in Image 1 but not Image 2?",
        "choices",
        "first_not_second",
    ),
    ("counting", "comprehensive", "What is the total number of “{object}” across images?", "choices", "total"),
    ("counting", "comprehensive", "Which object appears {count} times across images?", "choices", "appears_count"),
    ("counting", "comprehensive", "In how many images is a “{object}” present?", "choices", "image_count"),
    ("counting", "selective", "In which image are {count} “{object}” found?", "images", "select_count"),
    ("counting", "comparative", "In which image does the “{object}” appear most/least?", "images_only", "most_least"),
    ("position", "comprehensive", "Is a {subject} {relation} a {anchor} present in any image?", "yes_some_none", "any"),
    (
        "position",
        "comprehensive",
        "Is a {subject} {relation} a {anchor} present in all images?",
        "yes_some_none",
        "all",
    ),
    (
        "position",
        "comprehensive",
        "Which object with spatial relationship appears in one image?",
        "choices",
        "which_any",
    ),
    (
        "position",
        "comprehensive",
        "Which object with spatial relationship appears in all images?",
        "choices",
        "which_all",
    ),
    ("position", "selective", "In which image is a {subject} {relation} a {anchor}?", "images", "select"),
    ("position", "selective", "Where is “{subject} {relation} {anchor}” present?", "images", "select"),
    (
        "position",
        "comparative",
        "Which object with spatial relationship is in Image 1 but not Image 2?",
        "choices",
        "first_not_second",
    ),
)

TEMPLATES: tuple[Template, ...] = tuple(
    Template(number, task, pattern, text, layout, rule)
    for number, (task, pattern, text, layout, rule) in enumerate(_TABLE_1, start=1)
)
TASKS = ("existence", "counting", "attribute", "position")


def option_texts(layout: str, num_images: int, choices: list[str] | None = None) -> list[str]:
    """The option texts of a layout in letter order (``choices``: the four candidates of ``choices``)."""
    if layout == "yes_some_none":
        return list(YES_SOME_NONE)
    if layout == "choices":
        return [*(choices or []), NONE_OF_THE_ABOVE]
    images = [f"Image {number}" for number in range(1, num_images + 1)]
    return images if layout == "images_only" else [*images, NONE_OF_THE_ABOVE]


def answerable_letters(layout: str, num_images: int) -> str:
    """The letters that can be a layout's answer (all but "I don't know"): the balance check's chance level."""
    count = 3 if layout == "yes_some_none" else len(option_texts(layout, num_images, [""] * CHOICES))
    return LETTERS[:count]


def lettered(texts: list[str]) -> dict[str, str]:
    """``{"A": texts[0], "B": texts[1], ...}``."""
    return dict(zip(LETTERS, texts))
