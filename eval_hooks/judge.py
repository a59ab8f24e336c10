"""The optional LLM judge: resolves the answers the rule-based graders cannot, through the shared cached
client (:class:`core.llm_client.ChatClient`), so a rerun sends no request already answered.

Two uses:

- **Unresolved answers** (every benchmark with an ``answer_format``): an answer the rules leave
  unresolved ("I think the second one", "It seems likely") is shown to the judge with the question and,
  for multiple choice, the options; the judge replies with one canonical answer (yes / no, an option
  letter, a count) or "none", and its reply is checked by the same grader as a model's answer. The answer
  the judge resolves replaces the model's text for scoring only; ``predictions.jsonl`` is never changed.
- **HallusionBench over ``gt_answer_details``**, as the official evaluation does with GPT-4: every answer
  is judged correct, incorrect or uncertain against the reference explanation; a correct answer scores
  as the reference label, an incorrect one as the opposite, an uncertain one as unresolved (wrong).

Each scored result records the judge's model and the share of answers resolved by the rules, by the
judge, and left unresolved.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from eval_hooks.answers import extract_count, extract_option
from eval_hooks.base import Benchmark, EvalItem, RubricJudged
from eval_hooks.mcq import option_block
from rewards.graders import extract_yes_no

SYSTEM = "You grade answers written by another model. Reply with the requested label only."

ASK = {
    "yes_no": (
        "A model was asked a yes/no question about an image.\nQuestion: {question}\nModel's answer: {answer}\n"
        "Does the answer amount to yes or to no? Reply with exactly one word: yes, no, or none (neither)."
    ),
    "option": (
        "A model was asked a multiple-choice question about images.\nQuestion: {question}\nOptions:\n{options}\n"
        "Model's answer: {answer}\nWhich option does the answer choose? Reply with the option's letter alone, "
        "or none when it chooses no option or several."
    ),
    "count": (
        "A model was asked to count something in an image.\nQuestion: {question}\nModel's answer: {answer}\n"
        "What count does the answer give? Reply with the number in digits alone, or none when it gives none."
    ),
}

HALLUSION = (
    "A model answered a question about an image (or about general knowledge).\nQuestion: {question}\n"
    "Reference answer: {reference}\nModel's answer: {answer}\n"
    "Compare the model's answer with the reference. Reply with exactly one word: correct (it agrees with the "
    "reference), incorrect (it contradicts it), or uncertain (it does not commit to an answer)."
)


def rule_answer(benchmark: Benchmark, item: EvalItem, text: str) -> str | None:
    """The canonical answer the rule-based grader finds for ``benchmark``'s answer format, else None."""
    fmt = getattr(benchmark, "answer_format", "")
    if fmt == "yes_no":
        return extract_yes_no(text)
    if fmt == "option":
        return extract_option(text, item.meta.get("options"))[0]
    if fmt == "count":
        count = extract_count(text)[0]
        return None if count is None else str(count)
    return None


def _question(item: EvalItem) -> str:
    return str(item.meta.get("question") or item.prompt)


class AnswerJudge:
    """An OpenAI-compatible LLM that resolves answers for scoring (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        cache_path: str | Path,
        api_key_env: str | None = None,
        concurrency: int = 8,
        max_retries: int = 5,
        timeout: float = 60.0,
        temperature: float = 0.0,
        max_tokens: int | None = 8,
    ) -> None:
        from core.llm_client import ChatClient

        self.model = model
        self._settings = {
            "base_url": base_url,
            "cache_path": cache_path,
            "api_key_env": api_key_env,
            "concurrency": concurrency,
        }
        self._rubric_clients: dict[tuple[float, int | None], Any] = {}
        self.client = ChatClient(
            base_url,
            model,
            cache_path=cache_path,
            api_key_env=api_key_env,
            concurrency=concurrency,
            max_retries=max_retries,
            timeout=timeout,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @staticmethod
    def applies_to(benchmark: Benchmark) -> bool:
        """Whether :meth:`resolve` uses the judge on ``benchmark`` at all (a rubric, HallusionBench's
        comparison, or answers of a format it can be asked about)."""
        mode = getattr(benchmark, "judge_mode", "")
        return mode in ("gt_answer_details", "rubric") or getattr(benchmark, "answer_format", "") in ASK

    def resolve(
        self, benchmark: Benchmark, items: list[EvalItem], predictions: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Predictions with judge-resolved answers substituted, and the resolution record."""
        if getattr(benchmark, "judge_mode", "") == "gt_answer_details":
            return self._hallusion(items, predictions)
        if getattr(benchmark, "judge_mode", "") == "rubric":
            return self._rubric(benchmark, items, predictions)
        fmt = getattr(benchmark, "answer_format", "")
        answered = [item for item in items if item.id in predictions and not item.missing_images]
        if fmt not in ASK:
            return predictions, {"model": self.model, "applies": False}
        pending = [item for item in answered if rule_answer(benchmark, item, predictions[item.id]) is None]
        prompts = [
            ASK[fmt].format(
                question=_question(item),
                answer=predictions[item.id],
                options=option_block(item.meta.get("options") or {}),
            )
            for item in pending
        ]
        replies = self.client.complete_many(prompts, system=SYSTEM, desc=f"judge {benchmark.name}") if prompts else []
        resolved = dict(predictions)
        steps: Counter[str] = Counter(rules=len(answered) - len(pending))
        for item, reply in zip(pending, replies):
            answer = rule_answer(benchmark, item, reply.strip())
            if answer is not None and reply.strip().lower() != "none":
                resolved[item.id] = answer
                steps["judge"] += 1
            else:
                steps["unresolved"] += 1
        return resolved, self._record(steps, len(answered))

    def _hallusion(self, items: list[EvalItem], predictions: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
        answered = [item for item in items if item.id in predictions and not item.missing_images]
        prompts = [
            HALLUSION.format(
                question=_question(item),
                reference=item.meta.get("gt_answer_details") or item.meta["gt_answer"],
                answer=predictions[item.id],
            )
            for item in answered
        ]
        replies = self.client.complete_many(prompts, system=SYSTEM, desc="judge hallusionbench") if prompts else []
        resolved = dict(predictions)
        steps: Counter[str] = Counter()
        for item, reply in zip(answered, replies):
            verdict = reply.strip().lower().strip(".")
            truth = "yes" if item.meta["gt_answer"] == "1" else "no"
            if verdict.startswith("correct"):
                resolved[item.id] = truth
            elif verdict.startswith("incorrect"):
                resolved[item.id] = "no" if truth == "yes" else "yes"
            else:
                resolved[item.id] = ""  # uncertain: never correct
                steps["unresolved"] += 1
                continue
            steps["judge"] += 1
        return resolved, self._record(steps, len(answered), mode="gt_answer_details")

    def rubric_client(self, temperature: float, max_tokens: int | None) -> Any:
        """A client on the same endpoint, model and cache with a benchmark's own sampling settings."""
        from core.llm_client import ChatClient

        key = (temperature, max_tokens)
        if key not in self._rubric_clients:
            self._rubric_clients[key] = ChatClient(
                self._settings["base_url"],
                self.model,
                cache_path=self._settings["cache_path"],
                api_key_env=self._settings["api_key_env"],
                concurrency=self._settings["concurrency"],
                temperature=temperature,
                max_tokens=max_tokens,
            )
        return self._rubric_clients[key]

    def _rubric(
        self, benchmark: RubricJudged, items: list[EvalItem], predictions: dict[str, str]
    ) -> tuple[dict[str, str], dict[str, Any]]:
        answered = [item for item in items if item.id in predictions and not item.missing_images]
        requests = [benchmark.judge_request(item, predictions[item.id]) for item in answered]
        client = self.rubric_client(
            getattr(benchmark, "judge_temperature", 0.0), getattr(benchmark, "judge_max_tokens", None)
        )
        ordered: list[str] = [""] * len(requests)
        for system in dict.fromkeys(system for _, system in requests):  # one batch per system message (usually one)
            indices = [i for i, (_, sys_msg) in enumerate(requests) if sys_msg == system]
            replies = client.complete_many(
                [requests[i][0] for i in indices], system=system, desc=f"judge {benchmark.name}"
            )
            for i, reply in zip(indices, replies):
                ordered[i] = reply
        resolved = dict(predictions)
        steps: Counter[str] = Counter()
        for item, reply in zip(answered, ordered):
            verdict = benchmark.judge_verdict(item, reply)
            resolved[item.id] = "" if verdict is None else verdict
            steps["judge" if verdict is not None else "unresolved"] += 1
        record = self._record(steps, len(answered), mode="rubric", client=client)
        record["reviews"] = {item.id: reply for item, reply in zip(answered, ordered)}
        return resolved, record

    def _record(
        self, steps: Counter[str], total: int, mode: str = "unresolved_answers", client: Any = None
    ) -> dict[str, Any]:
        client = client or self.client
        shares = {
            f"{step}_share": 100 * steps[step] / total if total else 0.0 for step in ("rules", "judge", "unresolved")
        }
        return {
            "model": self.model,
            "mode": mode,
            "applies": True,
            "answers": total,
            **{k: steps[k] for k in ("rules", "judge", "unresolved")},
            **shares,
            "requests_sent": client.requests_sent,
            "cache_hits": client.cache_hits,
        }
