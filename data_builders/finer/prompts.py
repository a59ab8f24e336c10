"""The LLM prompts of the FINER-Tuning data pipeline (FINER, arXiv 2603.17662, Sec. 3, App. G,
Figs. 16-23), written in our own words with the same content and rules.

Departures, all small and stated here:
- extraction prompts accept ``PHRASE=NONE`` when nothing qualifies (the paper's WH prompt has a similar
  ``SKIP``), so "no usable object" is an answer, not a format error;
- the attribute to replace in Ψ−ATTR is chosen in code and passed as ``ATTRIBUTE_INDEX`` (Sec. 3: "we
  randomly select one instance of T"), as the paper's OBJ and REL prompts already do; at temperature 0 an
  LLM asked to pick "at random" would always pick the same kind of unit;
- the REL extraction asks for the paper's preferred form ``The <object> is <r1>, is <r2> ... and is <rN>``
  so that the clauses can be checked in code;
- the WH sentence prompt (Ψ+WH, "a composed sentence describing two objects with a relation and summarized
  attributes", Sec. 3) is not printed in the paper; ours follows that description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """One kind of LLM request: a name (used in counts and logs) and its system prompt."""

    name: str
    system: str

    def messages(self, user: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


RETRY = (
    "That answer was rejected: {reason}. Follow every rule of the task and answer again with exactly one line "
    "in the required format."
)

_SOURCE_RULES = (
    "Use only what the caption states: copy, never invent or infer. If nothing in the caption qualifies, answer "
    "exactly PHRASE=NONE."
)

OBJ_EXTRACT = Task(
    "obj_extract",
    "You extract information from an image caption.\n"
    "Pick up to FIVE main objects of the described scene. An object counts as a main object only if the caption "
    "gives it at least one descriptive attribute (for example a colour, size or material, a 'with' phrase or a "
    "possession, an appositive, a relative clause, or an explicit number).\n"
    "Rules:\n"
    "- Output only names of objects that the caption mentions as part of the scene. Never invent or infer one.\n"
    "- Give plain object names without adjectives, but KEEP any number or quantifier the caption states "
    "(e.g. 'two cats', 'five chickens', 'a pair of skis').\n"
    "- When several mentions share a name and the caption gives no number, use the plural (e.g. 'dogs').\n"
    "- List 1 to 5 main objects; if only one is present, give just that one. Do not add quantifiers such as "
    "'some' that the caption does not use.\n"
    f"- {_SOURCE_RULES}\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<the objects separated by commas, with 'and' before the last one, e.g. 'a dog, a cat and two birds'>\n"
    "No trailing period and no other text.",
)

_ATTRIBUTE_TYPES = (
    "Attributes that count:\n"
    "- appearance, colour, pattern, size, shape, material, markings or printed text and numbers, condition or "
    "state, orientation or pose, and other visible features of the object itself;\n"
    "- accessories physically attached to the object (such as a collar on a dog) count; other objects that merely "
    "appear nearby do not.\n"
)

ATTR_EXTRACT = Task(
    "attr_extract",
    "You extract information from an image caption.\n"
    "Choose ONE main object of the caption that has at least one described attribute. Take only attribute phrases "
    "that the caption states explicitly about that object (never infer or guess), and combine them into ONE noun "
    "phrase describing the object.\n" + _ATTRIBUTE_TYPES + "Constraints:\n"
    "- Leave out spatial relations to other main objects (e.g. 'to the left of the bus').\n"
    "- Leave out actions that involve other main objects (e.g. 'holding a cup').\n"
    "- Every attribute must clearly describe the chosen object; never take attributes of the other objects.\n"
    "- Take 1 to 5 attributes; if fewer than five are stated take fewer, and if only one is stated use that one.\n"
    "- You may rewrite an attribute as a plain adjective phrase (e.g. 'red', 'shiny metal', 'long-tailed') or as a "
    "'with ...' phrase (e.g. 'with yellow eyes', 'with its nose pointing to the left', 'with the text \"SALE\"') as "
    "long as the meaning stays the same.\n"
    "- Join several 'with ...' phrases with commas and 'and' (e.g. 'with yellow eyes, with a striped tail, and with "
    "a scar').\n"
    f"- {_SOURCE_RULES}\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<your noun phrase with its attributes>\n"
    "No trailing period and no other text.",
)

REL_EXTRACT = Task(
    "rel_extract",
    "You extract information from an image caption.\n"
    "Choose ONE main object of the caption that clearly takes part in at least one relation with another object. "
    "Take relations only if the caption states them explicitly; never infer or guess.\n"
    "Relations that count:\n"
    "- spatial ones, e.g. 'behind X', 'in front of Y', 'on Z', 'under W', 'next to Q', 'between A and B', "
    "'near C', 'inside D', 'at E';\n"
    "- actions directed at another object, e.g. 'holding a cup', 'biting a bone', 'looking at the door'.\n"
    "Constraints:\n"
    "- Every relation must involve the chosen object.\n"
    "- Name the other objects with plain nouns; add an attribute only when it is needed to tell apart objects "
    "with the same name.\n"
    "- List 1 to 5 relations; if only one is present, give just that one.\n"
    f"- {_SOURCE_RULES}\n"
    "Write ONE fluent phrase that starts with the object and then lists its relations, in the form "
    "'The <object> is <relation 1>, is <relation 2>, ... and is <relation N>' (use 'are' for a plural object).\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<your phrase with the relations>\n"
    "No trailing period and no other text.",
)

WH_SENTENCE = Task(
    "wh_sentence",
    "You extract information from an image caption.\n"
    "Find one statement in the caption that clearly involves exactly two objects and one explicit relation "
    "between them: a spatial relation (e.g. 'behind', 'on', 'under', 'next to', 'inside') or an action of one "
    "object on the other (e.g. 'holding', 'biting', 'looking at', 'sitting on').\n"
    "Rewrite it as ONE sentence of the form '<first object with its attributes> <relation> <second object with its "
    "attributes>', adding for each object the attributes the caption explicitly states about it (appearance, "
    "colour, pattern, size, shape, material, text or numbers, condition, pose; attached accessories count).\n"
    "Constraints:\n"
    "- Never invent or infer relations or attributes.\n"
    "- Use exactly one relation between the two objects (e.g. 'is next to', 'is on', 'is looking at').\n"
    "- Write attributes as plain adjectives or 'with ...' phrases, at most five per object, joined with commas "
    "and 'and'.\n"
    "If no statement of the caption qualifies, answer exactly SENTENCE=SKIP.\n"
    "Format: answer with EXACTLY one line\n"
    "SENTENCE=<the sentence>\n"
    "No other text.",
)

_WH_QA_COMMON = (
    "You write one WH question-answer pair from ONE sentence that describes two main objects and their explicit "
    "relation, possibly with attributes. The sentence is built as [obj_a] [attributes of a] [relation] [obj_b] "
    "[attributes of b].\n"
)
WH_QA_A = Task(
    "wh_qa",
    _WH_QA_COMMON + "Your task (A-mode):\n"
    "- The answer is exactly the span [obj_a][attributes of a], copied from the sentence.\n"
    "- Write ONE natural WH question whose answer is exactly that span.\n"
    "- In the question keep as much of [relation][obj_b][attributes of b] as reads naturally, word for word where it "
    "fits, and do NOT repeat or paraphrase [obj_a][attributes of a].\n"
    "- Be fluent and grammatical; add no details.\n"
    "Format: answer with EXACTLY one line\n"
    "Q=<your question> || A=<the exact span>\n"
    "No other text.",
)
WH_QA_B = Task(
    "wh_qa",
    _WH_QA_COMMON + "Your task (B-mode):\n"
    "- The answer is exactly the span [obj_b][attributes of b], copied from the sentence.\n"
    "- Write ONE natural WH question whose answer is exactly that span.\n"
    "- In the question keep as much of [obj_a][attributes of a] and [relation] as reads naturally, word for word "
    "where it fits, and do NOT repeat or paraphrase [obj_b][attributes of b].\n"
    "- Be fluent and grammatical; add no details.\n"
    "Format: answer with EXACTLY one line\n"
    "Q=<your question> || A=<the exact span>\n"
    "No other text.",
)

OBJ_NEGATIVE = Task(
    "obj_negative",
    "You create negative objects.\n"
    "You receive a caption, a list of objects as PHRASE=... and REPLACE_INDEX=k (counting from 1). Replace EXACTLY "
    "the k-th object of PHRASE with a NEGATIVE object that is clearly different.\n"
    "Keep every other object unchanged, in the same order and with the same punctuation. Keep the quantifier or "
    "determiner of the replaced slot (e.g. 'two cats' -> 'two bicycles').\n"
    "The negative object:\n"
    "- must clearly differ from the replaced object (not a synonym, not just singular or plural);\n"
    "- must not be a synonym or near-equivalent of ANY object in the caption;\n"
    "- must not occur anywhere in the caption (as a whole word, singular or plural).\n"
    "Do not change any other item, do not reorder items, do not add or remove items.\n"
    "Edge cases: if REPLACE_INDEX is larger than the number of objects, replace the LAST one; if it is smaller than "
    "1, replace the FIRST one.\n"
    "Check before answering: the list has as many items as before and exactly one item (the k-th by the rule above) "
    "differs.\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<the new list in the same format>\n"
    "No other text, no quotes, no trailing period.",
)

ATTR_NEGATIVE = Task(
    "attr_negative",
    "You edit attributes into negatives.\n"
    "You receive an ATTRIBUTE PHRASE: one noun phrase describing one main object with 1 to 5 attributes, and "
    "ATTRIBUTE_INDEX=k (counting from 1, left to right). Each attribute is one replaceable unit: either (a) the "
    "group of adjectives before the noun (e.g. 'long-sleeved red'), or (b) one whole 'with ...' clause, or another "
    "clause, separated by commas or 'and'.\n"
    "Task: replace the k-th attribute unit with a NEGATIVE attribute that is clearly different.\n"
    "Attributes that may be changed: appearance, colour, pattern, size, shape, material, texture, markings or "
    "printed text and numbers, condition or state, orientation or pose, and accessories attached to the object; "
    "vary the kind of change.\n"
    "Rules for the replacement:\n"
    "- Keep the object noun and every other attribute unchanged; keep the order, punctuation, articles, quotes, "
    "units and capitalisation.\n"
    "- Keep the grammatical shape of the replaced unit (an adjective group stays an adjective group, a 'with ...' "
    "clause stays a 'with ...' clause).\n"
    "- The replacement must clearly differ from the original and must not be a synonym, near-synonym or "
    "morphological variant of any attribute in the phrase.\n"
    "- Do not repeat an attribute that is already in the phrase.\n"
    "Check before answering: exactly one attribute unit differs; all others are identical.\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<the rewritten noun phrase>\n"
    "No other text, no quotes, no trailing period.",
)

REL_NEGATIVE = Task(
    "rel_negative",
    "You edit relations into negatives.\n"
    "Input:\n  CLAUSE_INDEX=<which clause to edit, counting from 1>\n"
    "  PHRASE=The <HEAD> <clause 1>, <clause 2>, ... and <clause N>\n"
    "Each clause is a relation written as a verb plus its complement, e.g. 'is on a table', 'are between two cars', "
    "'has a transparent faceplate', 'holds a bottle', 'wears a red jersey', 'faces left'.\n"
    "Task: edit EXACTLY the clause at CLAUSE_INDEX so that it states a clearly different (ideally opposite) "
    "NEGATIVE relation. Edit it in ONE of these ways:\n"
    "(A) For a spatial relation given by a preposition or comparator (in, on, inside, outside, under, over, above, "
    "below, behind, in front of, to the left of, to the right of, between, near, at, surrounding, on top of, at the "
    "bottom of, ...), swap that spatial term for an opposite or clearly different one (e.g. on -> inside, "
    "in -> out of, left -> right, above -> below, beside -> inside).\n"
    "(B) For an action of the HEAD, swap the action for a clearly different or opposite one by changing the main "
    "verb (e.g. holds -> drops, wears -> removes, shows -> hides, opens -> closes, runs -> stands); adverbs and "
    "prepositions may change too ('is standing on' -> 'is running away from'). Keep tense, number, aspect and "
    "auxiliaries ('is holding' -> 'is dropping', 'has opened' -> 'has closed').\n"
    "(C) For possession or properties of the HEAD (has, is made of, shows, displays, reads, contains, wears, ...), "
    "replace the complement with something clearly different (e.g. 'contains two plastic bags' -> 'contains three "
    "paper bags').\n"
    "Hard rules:\n"
    "- If CLAUSE_INDEX is larger than the number of clauses, edit the LAST clause.\n"
    "- Keep the HEAD exactly as in the input.\n"
    "- Keep every other clause unchanged, with its separators (commas and the final 'and'); do not reorder clauses.\n"
    "- Edit only the chosen clause; do not add or remove clauses; the edited clause must clearly differ from the "
    "original.\n"
    "- Do not just insert 'not'; change words or complements concretely.\n"
    "- The new clause must not repeat another clause and must stay grammatical.\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<the rewritten phrase>\n"
    "No other text, no trailing period.",
)

WH_NEGATIVE = Task(
    "wh_negative",
    "You turn a POSITIVE WH question into a counterfactual NEGATIVE WH question with its answer, by replacing "
    "EXACTLY ONE attribute clause of the main object named in the question.\n"
    "Definitions:\n"
    "- Main object: the plain head noun phrase that the attributes modify (e.g. 'a mug', 'the DSLR camera'). If "
    "the question names several objects, take the one with more attributes.\n"
    "- Attribute clause: a modifier that describes the main object directly: adjectives before it (colour, "
    "material, pattern, size, shape, quantity, e.g. 'red', 'ceramic', 'wide'), phrases after it ('with ...', "
    "'featuring ...', 'bearing ...', 'labeled \"...\"', participles such as 'wearing ...'), or other short "
    "descriptors of texture, condition, pose, printed text or numbers.\n"
    "- Relation clause: the words that place the main object relative to something else ('on', 'under', 'next "
    "to', 'in front of', 'behind', 'to the left of', 'is holding', ...).\n"
    "Questions usually read 'WH + [main object + attributes] + [relation]?' or 'WH + [relation] + [main object + "
    "attributes]?'; attributes may stand before or after the noun.\n"
    "Rules:\n"
    "1) Find all attribute clauses of the main object.\n"
    "2) Pick ONE of them at random (before or after the noun may both be picked) and replace its content with a "
    "CLEARLY DIFFERENT or even OPPOSITE attribute; several adjectives inside that clause may change.\n"
    "3) Do not add, remove or reorder other attribute clauses. Do not change the main object or the relation "
    "clause.\n"
    "4) If the main object truly has no attribute clause, answer exactly: SKIP\n"
    "Answer sentence (choose what fits, with correct number agreement, repeating the original attribute word for "
    "word):\n"
    "- The [main object] is not [new attribute], but it is [original attribute].\n"
    "- The [main object] does not have [new attribute], but it has [original attribute].\n"
    "- The [main object] contains no [new attribute], but it has/contains [original attribute].\n"
    "If none fits, write a short natural denial stating that the object lacks the new attribute and has the "
    "original one.\n"
    "Format: answer with EXACTLY one line\n"
    "Q=<negative question> || A=<negative answer>\n"
    "No other text.",
)

NEGATIVE_PROPOSAL = Task(
    "negative_proposal",
    "You propose negatives for scene-graph entries.\n"
    "You receive the LEVEL (object, attribute or relation), the POSITIVE phrase that is true for an image, the "
    "negatives already in use, and a REJECTED negative that turned out to be visible in the image or ambiguous.\n"
    "Propose ONE new negative with an opposite or clearly different meaning from the positive:\n"
    "- not a synonym, near-synonym or variant of the positive, of the negatives in use, or of the rejected one;\n"
    "- plausible in the same kind of scene, but clearly a different thing, property or relation;\n"
    "- in the same grammatical form as the positive (an object name stays an object name, a 'with ...' attribute "
    "stays a 'with ...' attribute, a relation such as 'is sitting on the' keeps its verb form and trailing article).\n"
    "Format: answer with EXACTLY one line\n"
    "PHRASE=<the new negative>\n"
    "No other text, no quotes, no trailing period.",
)
