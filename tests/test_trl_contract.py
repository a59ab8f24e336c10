"""The TRL contract: every TRL private name veritune's adapter (core/trl_adapter.py) relies on, checked
against the installed TRL, so that a TRL upgrade fails here, naming what moved, before a run fails halfway.

On a failure after a TRL upgrade: read the named TRL method in the new release, update core/trl_adapter.py
(and the overrides in finetune/grpo_trainer.py) to it, then REQUIRED_TRL and pyproject's ``trl==`` pin together.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from core import trl_adapter
from core.errors import UserError
from core.trl_adapter import Generated, pack_generated, unpack_generated

UPGRADE = "update core/trl_adapter.py to the new TRL (tests/test_trl_contract.py's docstring says how)"


def _function_ast(function: object) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _assigned_self_attributes(function: object) -> set[str]:
    return {
        target.attr
        for node in ast.walk(_function_ast(function))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


def _names(node: ast.expr) -> list[str]:
    assert isinstance(node, ast.Tuple), ast.dump(node)
    return [element.id if isinstance(element, ast.Name) else ast.dump(element) for element in node.elts]


def test_installed_trl_is_the_one_the_adapter_is_written_for() -> None:
    assert trl_adapter.installed_trl() == trl_adapter.REQUIRED_TRL, (
        f"trl {trl_adapter.installed_trl()} installed, the adapter is written for {trl_adapter.REQUIRED_TRL}: "
        f"run this file's other tests against it and {UPGRADE}"
    )
    trl_adapter.check_trl_version()  # passes on the pinned TRL


def test_version_check_refuses_another_trl_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trl_adapter, "installed_trl", lambda: "1.17.0")
    with pytest.raises(UserError) as raised:
        trl_adapter.check_trl_version()
    assert str(raised.value) == (
        "trl 1.17.0 installed; veritune's TRL adapter is written for 1.16.0: pip install trl==1.16.0"
    )
    assert "\n" not in str(raised.value)


def test_pyproject_pins_the_trl_the_adapter_is_written_for() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert f"trl=={trl_adapter.REQUIRED_TRL}" in project["dependencies"], (
        "pyproject's trl pin and core/trl_adapter.REQUIRED_TRL differ: change them together"
    )


@pytest.mark.parametrize("name", sorted(trl_adapter.GRPO_OVERRIDES))
def test_overridden_grpo_methods_keep_their_signature(name: str) -> None:
    from trl import GRPOTrainer

    method = getattr(GRPOTrainer, name, None)
    assert method is not None, f"TRL's GRPOTrainer has no {name} (finetune/grpo_trainer.py overrides it): {UPGRADE}"
    parameters = tuple(inspect.signature(method).parameters)
    assert parameters == trl_adapter.GRPO_OVERRIDES[name], (
        f"GRPOTrainer.{name}{parameters} differs from the adapter's {trl_adapter.GRPO_OVERRIDES[name]}: {UPGRADE}"
    )


def test_overridden_grpo_methods_are_called_as_the_overrides_expect() -> None:
    """TRL calls the overridden methods itself: with the arguments the overrides take, ``_generate``'s tuple
    unpacked in the adapter's order."""
    from trl import GRPOTrainer

    scoring = _function_ast(GRPOTrainer._generate_and_score_completions)
    calls = [
        node
        for node in ast.walk(scoring)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("_")
    ]
    called = {call.func.attr: call for call in calls}  # type: ignore[union-attr]
    assert "_generate" in called and "_calculate_rewards" in called, f"{sorted(called)}: {UPGRADE}"
    assert len(called["_generate"].args) == 1
    assert len(called["_calculate_rewards"].args) == 4
    unpacked = [
        node.targets[0]
        for node in ast.walk(scoring)
        if isinstance(node, ast.Assign) and node.value is called["_generate"]
    ]
    assert len(unpacked) == 1 and len(_names(unpacked[0])) == len(Generated._fields), (
        f"_generate_and_score_completions unpacks _generate into other values than the adapter's "
        f"{Generated._fields}: {UPGRADE}"
    )


def test_generate_returns_the_adapters_fields_in_order() -> None:
    """``Generated``'s fields are the names ``GRPOTrainer._generate`` returns, in its order (dynamic sampling
    joins the rounds' tuples field by field, by these names)."""
    from trl import GRPOTrainer

    returns = [node for node in ast.walk(_function_ast(GRPOTrainer._generate)) if isinstance(node, ast.Return)]
    assert len(returns) == 1, f"GRPOTrainer._generate has {len(returns)} return statements: {UPGRADE}"
    assert tuple(_names(returns[0].value)) == Generated._fields, (  # type: ignore[arg-type]
        f"GRPOTrainer._generate returns ({', '.join(_names(returns[0].value))}), the adapter's Generated names "
        f"({', '.join(Generated._fields)}): {UPGRADE}"  # type: ignore[arg-type]
    )


def test_grpo_attributes_the_adapter_reads_are_set_by_trl() -> None:
    from trl import GRPOTrainer

    assigned = _assigned_self_attributes(GRPOTrainer.__init__)
    missing = [name for name in trl_adapter.GRPO_ATTRIBUTES if name not in assigned]
    assert not missing, f"GRPOTrainer.__init__ no longer sets {missing}: {UPGRADE}"
    source = inspect.getsource(GRPOTrainer.__init__)
    assert 'self._metrics = {"train": defaultdict(list)' in source, f"GRPOTrainer._metrics changed shape: {UPGRADE}"
    assert '"prompt": deque(' in source and '"completion": deque(' in source, (
        f"GRPOTrainer._logs no longer holds the prompt and completion columns: {UPGRADE}"
    )
    assert "self._pending_extra_logs = defaultdict(list)" in source, (
        f"GRPOTrainer._pending_extra_logs changed shape: {UPGRADE}"
    )


def test_vllm_sleep_flag_is_what_trl_reads_before_generating() -> None:
    from trl.generation.vllm_generation import VLLMGeneration

    flag = trl_adapter.VLLM_SLEEP_FLAG
    assert flag in _assigned_self_attributes(VLLMGeneration.sync_weights), (
        f"sync_weights doesn't clear {flag}: {UPGRADE}"
    )
    assert f"self.{flag}" in inspect.getsource(VLLMGeneration.generate), (
        f"VLLMGeneration.generate no longer reads {flag} (eval_hooks/runner.py sets it after its own sleep): {UPGRADE}"
    )


def test_rollout_bans_go_where_trl_generates() -> None:
    """``ban_rollout_tokens`` extends TRL's ``suppress_tokens`` (transformers) and ``VLLMGeneration``'s sampling
    extras, which TRL puts into the colocated ``SamplingParams`` and into every server request."""
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    init = inspect.getsource(GRPOTrainer.__init__)
    assert 'generation_kwargs["suppress_tokens"] = [model.config.image_token_id]' in init, (
        f"GRPOTrainer no longer suppresses the image token with transformers: {UPGRADE}"
    )
    extras = trl_adapter.VLLM_SAMPLING_EXTRAS
    assert extras in _assigned_self_attributes(VLLMGeneration.__init__), f"VLLMGeneration has no {extras}: {UPGRADE}"
    generate = inspect.getsource(VLLMGeneration.generate)
    assert f'"generation_kwargs": self.{extras}' in generate, f"vLLM server requests lost {extras}: {UPGRADE}"
    assert f"generation_kwargs.update(self.{extras})" in generate, f"colocated SamplingParams lost {extras}: {UPGRADE}"
    assert "SamplingParams(**generation_kwargs)" in generate, f"colocated SamplingParams are built otherwise: {UPGRADE}"


def test_ban_rollout_tokens_keeps_the_recipes_own_bans() -> None:
    from types import SimpleNamespace

    server = SimpleNamespace(generation_kwargs={"bad_words": ["maybe"], "seed": 1})
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=server)
    trl_adapter.ban_rollout_tokens(trainer, {"<|image_pad|>": 7, "maybe": 9})
    assert server.generation_kwargs == {"bad_words": ["maybe", "<|image_pad|>"], "seed": 1}
    config = SimpleNamespace(suppress_tokens=[7, 3])
    trainer = SimpleNamespace(use_vllm=False, generation_config=config, generation_kwargs={"suppress_tokens": [7, 3]})
    trl_adapter.ban_rollout_tokens(trainer, {"<|image_pad|>": 7, "<|vision_end|>": 8})
    assert config.suppress_tokens == trainer.generation_kwargs["suppress_tokens"] == [7, 3, 8]


def test_compact_lm_head_check_is_what_trls_fused_head_asks() -> None:
    import trl.trainer.utils as trl_utils

    name = trl_adapter.COMPACT_LM_HEAD_CHECK
    check = getattr(trl_utils, name, None)
    assert check is not None, f"trl.trainer.utils has no {name} (the compact_lm_head plugin patches it): {UPGRADE}"
    assert tuple(inspect.signature(check).parameters) == ("device",), f"{name}'s signature changed: {UPGRADE}"
    assert f"{name}(hidden_states.device)" in inspect.getsource(trl_utils.add_fused_lm_head), (
        f"add_fused_lm_head no longer asks {name} whether to score only the labelled positions: {UPGRADE}"
    )


def test_dpo_reads_the_reference_from_the_batch_as_the_collator_writes_it() -> None:
    """``miniature.cpu_speed.reference_in_workers`` sets the flag and fills the keys ``DPOTrainer._compute_loss``
    reads, and its ``ReferenceLogpsCollator`` calls the reference as ``_compute_loss`` does."""
    from trl import DPOTrainer

    flag = trl_adapter.DPO_PRECOMPUTED_FLAG
    assert flag in _assigned_self_attributes(DPOTrainer.__init__), (
        f"DPOTrainer.__init__ no longer sets {flag}: {UPGRADE}"
    )
    source = inspect.getsource(DPOTrainer._compute_loss)
    assert f"if self.{flag}:" in source, f"_compute_loss no longer reads {flag}: {UPGRADE}"
    for key in trl_adapter.DPO_REFERENCE_KEYS:
        assert f'inputs["{key}"]' in source, f"_compute_loss no longer reads the batch's {key}: {UPGRADE}"
    assert '_non_model_keys = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}' in source, (
        f"_compute_loss keeps other keys out of the model's arguments (DPO_NON_MODEL_KEYS): {UPGRADE}"
    )
    assert "self.ref_model(**ref_model_kwargs, labels=labels, fused_lm_head=True)" in source, (
        f"_compute_loss calls its reference otherwise (ReferenceLogpsCollator must call it the same way): {UPGRADE}"
    )
    assert "ref_per_token_logps = ref_outputs.log_probs[:, -seq_len:]" in source, f"{UPGRADE}"


def test_generated_round_trip_and_wrong_arity() -> None:
    values = tuple(range(len(Generated._fields)))
    named = unpack_generated(values)
    assert named.completions == values[3] and named.completion_ids == values[1]
    assert pack_generated(named) == values and type(pack_generated(named)) is tuple
    with pytest.raises(RuntimeError, match="returned 9 values.*test_trl_contract"):
        unpack_generated((*values, None))


def test_extra_logs_accessors() -> None:
    from collections import defaultdict
    from types import SimpleNamespace

    trainer = SimpleNamespace(_pending_extra_logs=defaultdict(list, {"why": ["a"]}))
    trl_adapter.put_extra_logs(trainer, {"score": [1, 2]})
    assert dict(trainer._pending_extra_logs) == {"score": [1, 2]}
    assert trl_adapter.take_extra_logs(trainer) == {"score": [1, 2]}
    assert not trainer._pending_extra_logs


def test_start_run_checks_the_trl_version_first(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from transformers import TrainingArguments

    from finetune.training import start_run

    monkeypatch.setattr(trl_adapter, "installed_trl", lambda: "2.0.0")
    with pytest.raises(UserError, match=r"^trl 2\.0\.0 installed; .*pip install trl==1\.16\.0$"):
        start_run(TrainingArguments(output_dir=str(tmp_path), report_to="none"))


def test_the_lm_head_plugin_patches_for_one_run_and_restores_trls_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """``miniature.cpu_speed.compact_lm_head`` patches TRL's check for the run it is applied to; the run's end restores
    TRL's own rule, so a later run of the process follows its own recipe."""
    from types import SimpleNamespace

    import torch
    import trl.trainer.utils as trl_utils

    from miniature.cpu_speed import compact_lm_head

    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)  # undone after the test
    callbacks: list[object] = []
    compact_lm_head(SimpleNamespace(add_callback=callbacks.append))
    assert trl_utils._use_triton(torch.device("cpu")) is True
    (restore,) = callbacks
    restore.on_train_end(None, None, None)
    assert trl_utils._use_triton(torch.device("cpu")) is False
