"""Per-image outputs of a frozen vision tower, computed once and reused (``vision_feature_cache``).

With ``freeze_vision_tower`` the tower's output for an image never changes during training, yet every step
recomputes it for every image in the batch, and an image comes back many times: the miniature's warm-start asks
about 16 questions of each image over its 6,000 steps, and a DPO row runs the tower for its chosen and its
rejected answer, in the policy and in the reference. This module replaces the tower's ``forward`` with one that
splits the batch's patches by image (``grid_thw``), looks each image up by a digest of its pixels and grid, runs
the real tower only on the images not seen yet (in one call), and assembles the same output the tower returns
(merged features, DeepStack features and the last hidden state, in the batch's order).

The tower computes each image on its own (its attention is block-diagonal over ``cu_seqlens``), so a cached
image's features are those it would get in any batch up to float rounding: the matrix products of a batch of
another size may round their last bit differently. It is meant for small models and datasets (the CPU
miniature): the cache holds every image's features in memory, up to ``max_images`` (least recently used out).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import Any

import torch

from core.errors import UserError

logger = logging.getLogger(__name__)


class VisionFeatureCache:
    """The replacement ``forward`` of one frozen Qwen-VL-style tower (``forward(hidden_states, grid_thw)``
    returning ``pooler_output`` (merged), ``deepstack_features`` and ``last_hidden_state``)."""

    def __init__(self, tower: torch.nn.Module, max_images: int = 100_000) -> None:
        self.tower, self.forward = tower, tower.forward
        self.merge = int(tower.spatial_merge_size) ** 2
        self.max_images = max_images
        self.entries: OrderedDict[bytes, tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]] = OrderedDict()
        self.hits = self.misses = 0

    def __call__(self, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any) -> Any:
        if any(parameter.requires_grad for parameter in self.tower.parameters()):
            raise RuntimeError("vision_feature_cache: the vision tower trains; its features cannot be cached")
        rows = grid_thw.prod(-1).tolist()
        patches = torch.split(hidden_states, rows)
        keys = [self._key(image, grid) for image, grid in zip(patches, grid_thw.tolist(), strict=True)]
        missing = list(dict.fromkeys(key for key in keys if key not in self.entries))
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        if missing:
            self._compute(missing, keys, patches, grid_thw, kwargs)
        entries = [self.entries[key] for key in keys]
        for key in keys:
            self.entries.move_to_end(key)
        while len(self.entries) > self.max_images:
            self.entries.popitem(last=False)
        return self._output_type(
            last_hidden_state=torch.cat([last for _, _, last in entries]),
            pooler_output=torch.cat([merged for merged, _, _ in entries]),
            deepstack_features=[
                torch.cat([deepstack[level] for _, deepstack, _ in entries]) for level in range(len(entries[0][1]))
            ],
        )

    @staticmethod
    def _key(image: torch.Tensor, grid: list[int]) -> bytes:
        raw = image.detach().contiguous().view(torch.uint8).cpu().numpy()  # any dtype, bf16 included
        digest = hashlib.blake2b(raw.tobytes(), digest_size=16)
        digest.update(repr(grid).encode())
        return digest.digest()

    def _compute(
        self,
        missing: list[bytes],
        keys: list[bytes],
        patches: tuple[torch.Tensor, ...],
        grid_thw: torch.Tensor,
        kwargs: dict[str, Any],
    ) -> None:
        first = [keys.index(key) for key in missing]
        grids = grid_thw[first]
        with torch.no_grad():
            output = self.forward(torch.cat([patches[i] for i in first]), grid_thw=grids, **kwargs)
        if isinstance(output, tuple):
            raise UserError("vision_feature_cache: the vision tower returned a tuple; it needs return_dict outputs")
        rows = grids.prod(-1).tolist()
        merged_rows = [count // self.merge for count in rows]
        merged = torch.split(output.pooler_output, merged_rows)
        deepstack = [torch.split(level, merged_rows) for level in output.deepstack_features or []]
        last = torch.split(output.last_hidden_state, rows)
        for index, key in enumerate(missing):
            self.entries[key] = (merged[index], [level[index] for level in deepstack], last[index])
        self._output_type = type(output)


def cache_vision_features(model: torch.nn.Module, max_images: int = 100_000) -> VisionFeatureCache:
    """Give ``model``'s frozen vision tower (a Qwen-VL ``visual`` module) a feature cache; returns it.

    Raises:
        UserError: the model has no such tower, or the tower still trains (``freeze_vision_tower`` first).
    """
    tower = getattr(getattr(model, "model", model), "visual", None)
    if tower is None or not hasattr(tower, "spatial_merge_size"):
        raise UserError(
            f"vision_feature_cache: {type(model).__name__} has no Qwen-VL vision tower (model.visual); only those "
            "are supported"
        )
    if any(parameter.requires_grad for parameter in tower.parameters()):
        raise UserError(
            "vision_feature_cache: needs freeze_vision_tower: true (a tower that trains changes its features)"
        )
    cache = VisionFeatureCache(tower, max_images)
    tower.forward = cache
    logger.info("vision_feature_cache: the frozen vision tower's features are computed once per image")
    return cache
