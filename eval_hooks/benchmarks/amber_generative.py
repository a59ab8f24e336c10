"""AMBER generative ("Describe this image."): CHAIR, Cover, Hal and Cog, as the official ``inference.py``
computes them from ``annotations.json`` (``truth`` and ``hallu`` objects per image), ``relation.json``
(each object's associated words) and ``safe_words.txt``.

Per response: the nouns are extracted and kept when they are AMBER vocabulary words (a key or value of
``relation.json``). Each kept noun that is a global safe word is skipped; one that is a truth object or
associated with one covers that truth object; one that is a hallu object or associated with one covers
that hallu object; a noun that covers no truth object is a hallucination. Then, summed over the whole
set (global ratios, not means of per-response ratios): CHAIR = hallucinated nouns / kept nouns; Cover =
covered truth objects / truth objects; Hal = share of responses with a hallucinated noun; Cog =
covered hallu objects / hallu objects. All in percent; CHAIR, Hal and Cog are lower-is-better.

Noun extraction. The official code tags with NLTK (``word_tokenize``, ``pos_tag``, nouns lemmatised with
WordNet) and also matches nouns to truth/hallu words by spaCy ``en_core_web_lg`` vector similarity above
0.8. veritune uses exactly that when NLTK (with its ``punkt``, tagger and ``wordnet`` data) and spaCy with
``en_core_web_lg`` are installed. Otherwise it uses a deterministic approximation, recorded in the result
as ``extraction``: words are lower-cased runs of letters; a word that is not a vocabulary word is reduced
by the regular English plural rules (-ies -> -y, -ves -> -f/-fe, -ches/-shes/-sses/-xes/-zes -> drop
-es, -men -> -man, -s -> drop) and kept only when the reduced form is a vocabulary word; there is no
part-of-speech filter (vocabulary words used as adjectives also count) and no vector-similarity
matching (only exact and associated words cover objects). The approximation can only under-count
coverage and over-count hallucinations for synonyms AMBER's association lists lack.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import read_json
from eval_hooks.base import Benchmark, EvalItem
from eval_hooks.benchmarks.amber import _find_annotations

SIMILARITY = 0.8  # the official --similarity_score
_WORD = re.compile(r"[a-z]+")
_PLURALS = (
    ("ies", "y"),
    ("ves", "f"),
    ("ves", "fe"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("sses", "ss"),
    ("xes", "x"),
    ("zes", "z"),
    ("men", "man"),
    ("s", ""),
)


class _RuleNouns:
    """The documented approximation: vocabulary words and their regular plurals."""

    name = "rule-based approximation"

    def __init__(self, vocabulary: set[str]) -> None:
        self.vocabulary = vocabulary

    def nouns(self, text: str) -> list[str]:
        found = []
        for word in _WORD.findall(text.lower()):
            if word in self.vocabulary:
                found.append(word)
                continue
            for suffix, replacement in _PLURALS:
                candidate = word[: -len(suffix)] + replacement
                if word.endswith(suffix) and len(candidate) > 1 and candidate in self.vocabulary:
                    found.append(candidate)
                    break
        return found

    def similar(self, word1: str, word2: str) -> bool:
        return False


class _OfficialNouns:
    """NLTK noun tagging with WordNet lemmas and spaCy en_core_web_lg similarity, as the official code."""

    name = "nltk+spacy"

    def __init__(self) -> None:
        import nltk
        import spacy
        from nltk.stem import WordNetLemmatizer

        self._nltk = nltk
        self._lemmatizer = WordNetLemmatizer()
        self._nlp = spacy.load("en_core_web_lg")
        self._lemmatizer.lemmatize("dogs")  # fails now, not mid-run, when the WordNet data is absent
        nltk.pos_tag(nltk.word_tokenize("a dog"))

    def nouns(self, text: str) -> list[str]:
        tagged = self._nltk.pos_tag(self._nltk.word_tokenize(text))
        return [self._lemmatizer.lemmatize(word) for word, tag in tagged if tag.startswith("NN")]

    def similar(self, word1: str, word2: str) -> bool:
        return self._nlp(word1).similarity(self._nlp(word2)) > SIMILARITY


def noun_extractor(vocabulary: set[str]) -> _RuleNouns | _OfficialNouns:
    """The official NLTK + spaCy extraction when it is installed with its data, else the approximation."""
    try:
        return _OfficialNouns()
    except Exception:  # noqa: BLE001 - not installed, or installed without its data/model: fall back
        return _RuleNouns(vocabulary)


def score_response(
    nouns: list[str],
    truth: list[str],
    hallu: list[str],
    association: dict[str, list[str]],
    safe: set[str],
    similar: Any,
) -> tuple[int, int, set[int], set[int]]:
    """One response: (hallucinated nouns, kept nouns, covered truth indices, covered hallu indices)."""
    truth_words = [(word, i) for i, obj in enumerate(truth) for word in association.get(obj, [])] + [
        (obj, i) for i, obj in enumerate(truth)
    ]
    hallu_words = [(word, i) for i, obj in enumerate(hallu) for word in association.get(obj, [])] + [
        (obj, i) for i, obj in enumerate(hallu)
    ]
    covered_truth: set[int] = set()
    covered_hallu: set[int] = set()
    hallucinated = 0
    for noun in nouns:
        if noun in safe:
            continue
        exact = next((i for word, i in truth_words if word == noun), None)
        if exact is not None:
            covered_truth.add(exact)
            continue
        hit = next((i for word, i in hallu_words if word == noun), None)
        if hit is not None:
            covered_hallu.add(hit)
        hit = next((i for word, i in hallu_words if similar(noun, word)), None)
        if hit is not None:
            covered_hallu.add(hit)
        near = next((i for word, i in truth_words if similar(noun, word)), None)
        if near is not None:
            covered_truth.add(near)
            continue
        hallucinated += 1
    return hallucinated, len(nouns), covered_truth, covered_hallu


class AmberGenerative(Benchmark):
    name = "amber_generative"
    default_max_new_tokens = 512
    data_layout = (
        "amber/query/query_generative.json + amber/annotations.json, relation.json, safe_words.txt (official), "
        "images in amber/image/"
    )

    def default_paths(self, data_root: Path) -> tuple[Path, Path]:
        return data_root / "amber" / "query" / "query_generative.json", data_root / "amber" / "image"

    def load(self, data_path: Path, image_root: Path | None = None) -> list[EvalItem]:
        data_path = Path(data_path)
        queries = read_json(data_path, what="AMBER query file")
        annotation_file = _find_annotations(data_path)
        annotations = read_json(annotation_file, what="AMBER annotations")
        for name in ("relation.json", "safe_words.txt"):
            if not (annotation_file.parent / name).is_file():
                raise UserError(f"{annotation_file.parent}: AMBER's {name} not found beside annotations.json")
        self._resources(annotation_file.parent)
        root = Path(image_root) if image_root else data_path.parent
        items = []
        for row, query in enumerate(queries if isinstance(queries, list) else []):
            if not isinstance(query, dict) or not {"id", "image", "query"} <= query.keys():
                raise UserError(f"{data_path}: row {row}: expected AMBER fields id, image, query")
            truth = annotations[query["id"] - 1] if 0 < query["id"] <= len(annotations) else None
            if (
                not isinstance(truth, dict)
                or truth.get("type") != "generative"
                or not {"truth", "hallu"} <= truth.keys()
            ):
                raise UserError(
                    f"{data_path}: row {row}: id {query['id']} has no generative annotation (truth, hallu) "
                    f"in {annotation_file}"
                )
            image = root / query["image"]
            items.append(
                self.image_item(
                    str(query["id"]),
                    query["query"],
                    image,
                    {
                        "truth": list(truth["truth"]),
                        "hallu": list(truth["hallu"]),
                        "resources": str(annotation_file.parent),
                    },
                )
            )
        if not items:
            raise UserError(f"{data_path}: expected a JSON list of AMBER queries (id, image, query)")
        return items

    @staticmethod
    def _resources(folder: Path) -> tuple[dict[str, list[str]], set[str]]:
        association = read_json(folder / "relation.json", what="AMBER relation.json")
        if not isinstance(association, dict):
            raise UserError(f"{folder / 'relation.json'}: expected a JSON object of word -> associated words")
        safe = {
            line.strip()
            for line in (folder / "safe_words.txt").read_text(encoding="utf-8").splitlines()
            if line.strip()
        }
        return association, safe

    def score(self, items: list[EvalItem], predictions: dict[str, str]) -> dict[str, Any]:
        if not items:
            return {"metrics": {}, "tables": {}, "counts": {"items": 0}}
        association, safe = self._resources(Path(items[0].meta["resources"]))
        vocabulary = set(association) | {word for words in association.values() for word in words}
        extractor = noun_extractor(vocabulary)
        hallucinated = kept = truth_total = truth_covered = hallu_total = hallu_covered = with_hallucination = 0
        rows = []
        for item in items:
            response = "" if item.missing_images else predictions.get(item.id, "")
            nouns = [noun for noun in extractor.nouns(response) if noun in vocabulary]
            bad, count, covered_truth, covered_hallu = score_response(
                nouns, item.meta["truth"], item.meta["hallu"], association, safe, extractor.similar
            )
            hallucinated += bad
            kept += count
            truth_total += len(item.meta["truth"])
            truth_covered += len(covered_truth)
            hallu_total += len(item.meta["hallu"])
            hallu_covered += len(covered_hallu)
            with_hallucination += bad > 0
            if len(rows) < 50:
                rows.append(
                    {
                        "id": item.id,
                        "nouns": " ".join(nouns),
                        "hallucinated": bad,
                        "covered": len(covered_truth),
                        "truth": len(item.meta["truth"]),
                    }
                )
        metrics = {
            "CHAIR": 100 * hallucinated / kept if kept else 0.0,
            "Cover": 100 * truth_covered / truth_total if truth_total else 0.0,
            "Hal": 100 * with_hallucination / len(items),
            "Cog": 100 * hallu_covered / hallu_total if hallu_total else 0.0,
        }
        counts = {
            "items": len(items),
            "nouns": kept,
            "hallucinated_nouns": hallucinated,
            "missing_images": sum(bool(i.missing_images) for i in items),
        }
        return {
            "metrics": metrics,
            "tables": {"per_item": rows},
            "counts": counts,
            "extraction": extractor.name,
            "lower_is_better": ["CHAIR", "Hal", "Cog"],
        }
