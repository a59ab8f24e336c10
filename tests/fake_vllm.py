"""A recording stand-in for the ``vllm`` package, for the vLLM code paths on this GPU-less machine.

``install(monkeypatch)`` puts a module named ``vllm`` into ``sys.modules`` (``importlib.util.find_spec``
then finds it, as it would the real package) whose ``LLM`` records its constructor's arguments and every
``generate``/``sleep``/``wake_up`` call, and answers each prompt with ``answer(prompt)`` (canned text). A
request of token ids (TRL's GRPO rollouts) is answered in token ids: the answer's tokens, end-of-turn appended,
with the tokenizer of the model the engine was built for. The engine honours ``SamplingParams(bad_words=...)``
as vLLM does (each word's tokens, encoded without special tokens; a one-token word is never sampled): a banned
token of the answer is left out, as a logit of -inf would leave it out.
``write_package(root)`` writes an importable ``vllm`` package (with its version metadata and the modules
TRL imports when vLLM is present) for entry points run in a subprocess.
Nothing here decides a test's outcome by itself: the tests check what veritune sent to vLLM and what it did
with the answers.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    extra: dict[str, Any] = field(default_factory=dict)

    def __init__(self, temperature: float = 1.0, max_tokens: int = 16, **extra: Any) -> None:
        self.temperature, self.max_tokens, self.extra = temperature, max_tokens, extra


@dataclass
class Logprob:
    logprob: float
    rank: int = 1


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None


@dataclass
class RequestOutput:
    prompt: str | None
    outputs: list[CompletionOutput]
    prompt_token_ids: list[int] | None = None


def banned_token_ids(tokenizer: Any, params: SamplingParams) -> set[int]:
    """The tokens vLLM never samples under ``params``: its one-token ``bad_words`` (vLLM's
    ``SamplingParams.update_from_tokenizer`` encodes each word without special tokens, with and without a
    leading space; a longer word is banned only after its prefix, which a canned answer does not need)."""
    banned = set()
    for word in params.extra.get("bad_words") or []:
        for text in (word.lstrip(), " " + word.lstrip()):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1:
                banned.add(ids[0])
    return banned


class FakeVLLM:
    """What the fake ``vllm`` module records: one entry per call, in order."""

    def __init__(self, answer: Callable[[str], str]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, Any]] = []
        self.module = types.ModuleType("vllm")
        self.module.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None)
        self.module.SamplingParams = SamplingParams
        self.module.LLM = self._llm_class()

    def _llm_class(self) -> type:
        record = self.calls
        fake = self

        class LLM:
            def __init__(self, **kwargs: Any) -> None:
                record.append(("LLM", kwargs))
                self.model = kwargs.get("model")
                runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._load_weights))
                worker = types.SimpleNamespace(model_runner=runner)
                self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))

            def _load_weights(self, weights: list[tuple[str, Any]]) -> None:
                record.append(("load_weights", [name for name, _ in weights]))

            def reset_prefix_cache(self) -> None:
                record.append(("reset_prefix_cache", None))

            def generate(
                self,
                requests: list[dict[str, Any]],
                params: SamplingParams | None = None,
                use_tqdm: bool = True,
                sampling_params: SamplingParams | None = None,
            ) -> list:
                params = params if params is not None else sampling_params
                record.append(("generate", {"requests": requests, "params": params}))
                if requests and "prompt_token_ids" in requests[0]:
                    return [self._answer_ids(r["prompt_token_ids"], params) for r in requests]
                return [RequestOutput(r["prompt"], [CompletionOutput(fake.answer(r["prompt"]))]) for r in requests]

            def _answer_ids(self, prompt_ids: list[int], params: SamplingParams) -> RequestOutput:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(self.model)
                text = fake.answer(tokenizer.decode(prompt_ids))
                banned = banned_token_ids(tokenizer, params)
                ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
                ids = [token for token in ids if token not in banned][: params.max_tokens]
                logprobs = [{token: Logprob(-1.0)} for token in ids]
                return RequestOutput(None, [CompletionOutput(tokenizer.decode(ids), ids, logprobs)], prompt_ids)

            def sleep(self, level: int = 1) -> None:
                record.append(("sleep", level))

            def wake_up(self, tags: list[str] | None = None) -> None:
                record.append(("wake_up", tags))

        return LLM

    def named(self, name: str) -> list[Any]:
        return [payload for call, payload in self.calls if call == name]


# What TRL 1.16 imports from vLLM once it sees the package installed (trl/generation/vllm_generation.py and
# vllm_client.py): enough for `from trl import GRPOTrainer` to import in a subprocess.
_PACKAGE_FILES = {
    "vllm/__init__.py": "from fake_vllm import SamplingParams, RequestOutput\n\n__version__ = '0.33.0'\n\n\n"
    "class LLM:\n    def __init__(self, **kwargs):\n        raise RuntimeError('no model here')\n",
    "vllm/sampling_params.py": "class StructuredOutputsParams:\n    pass\n",
    "vllm/utils/__init__.py": "",
    "vllm/utils/network_utils.py": "def get_ip():\n    return '127.0.0.1'\n",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/weight_transfer/__init__.py": "",
    "vllm/distributed/weight_transfer/nccl_common.py": "def trainer_init(*args, **kwargs):\n    raise RuntimeError\n",
    "vllm/distributed/weight_transfer/packed_tensor.py": (
        "def packed_nccl_broadcast_producer(*args, **kwargs):\n    raise RuntimeError\n"
    ),
    "vllm-0.33.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n",
    "vllm-0.33.0.dist-info/top_level.txt": "vllm\n",
}


def write_package(root: Path) -> Path:
    """An importable stand-in ``vllm`` package under ``root`` (put ``root`` on PYTHONPATH, with tests/)."""
    for name, text in _PACKAGE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def install(monkeypatch: pytest.MonkeyPatch, answer: Callable[[str], str] = lambda prompt: "Yes") -> FakeVLLM:
    """Make ``import vllm`` give the recording stand-in for the rest of the test (a GPU is reported too)."""
    fake = FakeVLLM(answer)
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    monkeypatch.setattr("core.gpu.cuda_available", lambda: True)
    return fake
