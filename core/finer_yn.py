"""The file format of FINER's yes/no granularity probe (FINER: "MLLMs Hallucinate under Fine-grained Negative
Queries", arXiv 2603.17662, Sec. 1 and Fig. 1), shared by its builder (``data_builders/finer/yn.py``, written
by ``veritune build finer-bench --protocol yn``) and its benchmark (``eval_hooks/benchmarks/finer_yn.py``).

One row per query: ``image, sample, level, pattern, polarity, negated, question, answer``. ``level`` is 1..7,
``pattern`` Fig. 1a's element sequence of that level, ``polarity`` ``pos`` (the true description, answer
``yes``) or ``neg`` (the same description with one contradiction, answer ``no``), ``negated`` the kind of
element contradicted (obj, attr, rel), ``sample`` the image and anchor object the description is about. Every
(``sample``, ``level``) has one ``pos`` and one ``neg`` row about the same image.
"""

LEVELS = (1, 2, 3, 4, 5, 6, 7)
# Fig. 1a, level by level: what the query describes, with the one contradicted element marked NEG_.
PATTERNS = {
    1: "[NEG_OBJ]",
    2: "[OBJ][NEG_ATTR]",
    3: "[OBJ][ATTR][NEG_ATTR]",
    4: "[OBJ][ATTR][ATTR][NEG_ATTR]",
    5: "[OBJ][ATTR][ATTR][ATTR][NEG_REL][OBJ]",
    6: "[OBJ][ATTR][ATTR][ATTR][REL][NEG_OBJ]",
    7: "[OBJ][ATTR][ATTR][ATTR][REL][OBJ][NEG_ATTR]",
}
NEGATED = {1: "obj", 2: "attr", 3: "attr", 4: "attr", 5: "rel", 6: "obj", 7: "attr"}
COLUMNS = ("image", "sample", "level", "pattern", "polarity", "negated", "question", "answer")
REQUIRED_COLUMNS = ("image", "sample", "level", "polarity", "question", "answer")
QUESTION = "Can you see the {x} in this image?"  # Fig. 1a's queries
