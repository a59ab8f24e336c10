"""The ``miniature.cpu_speed.foreach_adamw`` plugin: on the CPU the trainers build torch's AdamW with its
multi-tensor (foreach) kernels, and the weights come out the same, bit for bit, as with torch's per-tensor loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from miniature.cpu_speed import foreach_adamw


class Regressor(nn.Module):
    """A few layers of different shapes (biases, norms, an embedding), so the foreach kernels see many tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.body = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 8), nn.Linear(8, 1))

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        prediction = self.body(self.embed(ids).mean(dim=1)).squeeze(-1)
        return {"loss": nn.functional.mse_loss(prediction, labels)}


def rows(count: int = 96) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (count, 6), generator=generator)
    labels = torch.randn(count, generator=generator)
    return [{"ids": ids[i], "labels": labels[i]} for i in range(count)]


def trainer(tmp_path: Path, **overrides: object) -> Trainer:
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=8,
        max_steps=30,
        learning_rate=3e-2,
        weight_decay=0.1,  # both of the Trainer's parameter groups do work
        report_to="none",
        save_strategy="no",
        logging_steps=1000,
        seed=0,
        **{"optim": "adamw_torch", **overrides},  # as every recipe asks (transformers' default is the fused one)
    )
    return Trainer(model=Regressor(), args=args, train_dataset=rows())


def test_foreach_adamw_trains_the_same_weights_bit_for_bit(tmp_path: Path) -> None:
    loop, foreach = trainer(tmp_path / "loop"), trainer(tmp_path / "foreach")
    assert foreach_adamw(foreach) is True
    loop.train()
    foreach.train()
    assert [group["foreach"] for group in foreach.optimizer.param_groups] == [True, True]
    assert [group["foreach"] for group in loop.optimizer.param_groups] == [None, None]  # torch's CPU default: the loop
    trained = [dict(run.model.state_dict()) for run in (loop, foreach)]
    assert trained[0].keys() == trained[1].keys()
    assert all(torch.equal(trained[0][name], trained[1][name]) for name in trained[0])
    start = trainer(tmp_path / "start").model.state_dict()
    assert not torch.equal(start["body.0.weight"], trained[0]["body.0.weight"])  # they did train


@pytest.mark.parametrize("overrides", [{"optim": "adamw_torch_fused"}, {"optim": "sgd"}])
def test_other_optimizers_are_left_as_asked(tmp_path: Path, overrides: dict[str, str]) -> None:
    run = trainer(tmp_path, **overrides)
    assert foreach_adamw(run) is False and run.optimizer_cls_and_kwargs is None


def test_an_optimizer_given_to_the_trainer_is_kept(tmp_path: Path) -> None:
    run = trainer(tmp_path)
    run.optimizer_cls_and_kwargs = (torch.optim.AdamW, {"lr": 1e-3})
    assert foreach_adamw(run) is False and run.optimizer_cls_and_kwargs == (torch.optim.AdamW, {"lr": 1e-3})
