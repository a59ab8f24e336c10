"""CLIP-guided negative sampling (ORIC Alg. 2): for each image find its most similar other image I' by
cosine similarity of CLIP image embeddings, then rank classes absent from I' by
CLIPScore(I', "an image contains {name}") (Eq. 1) and keep the top k.

Image embeddings are computed in batches with a progress bar and cached in SQLite per (model, image), so
an interrupted build resumes and a rerun embeds nothing twice.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from core.errors import UserError
from core.hub import require_model_source
from core.progress import progress_bar

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch32"  # the encoder of the public ORIC builder
TEXT_TEMPLATE = "an image contains {name}"


def _features(output: object) -> torch.Tensor:
    """transformers 5 returns a model output from ``get_*_features``; older versions a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output  # type: ignore[attr-defined]


class ClipScorer:
    """Embeds images and texts with a CLIP-family model (any transformers CLIP/SigLIP id or directory).

    Image embeddings are cached in ``cache_dir/clip_embeddings.sqlite`` per (model, image), where an image
    is its path with its size and modification time (an edited file is embedded again) and a local model
    directory counts its weights' size and modification time (a rebuilt checkpoint is not confused with
    the old one).
    """

    def __init__(
        self,
        model_name: str,
        cache_dir: str | Path | None = None,
        device: str | None = None,
        batch_size: int = 64,
        workers: int | None = None,
    ):
        from transformers import AutoModel, AutoProcessor

        self.model_name = model_name
        self.batch_size = max(1, batch_size)
        self.workers = max(1, workers if workers is not None else min(8, os.cpu_count() or 1))
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        require_model_source(model_name, "--clip-model")
        try:
            self.model = AutoModel.from_pretrained(model_name).to(self.device).eval()
            self.processor = AutoProcessor.from_pretrained(model_name)
        except (OSError, ValueError) as err:
            raise UserError(f"--clip-model: cannot load {model_name!r} ({str(err).splitlines()[0]})") from None
        if not hasattr(self.model, "get_image_features") or not hasattr(self.model, "get_text_features"):
            raise UserError(f"--clip-model: {model_name!r} is not a CLIP-family model (no image and text towers)")
        # SigLIP was trained on texts padded to the full length; CLIP pads to the longest text.
        self._text_padding = "max_length" if "siglip" in self.model.config.model_type else True
        self._text_cache: dict[str, np.ndarray] = {}
        self._db = None
        if cache_dir is not None:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(Path(cache_dir) / "clip_embeddings.sqlite")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS emb (model TEXT, image TEXT, vector BLOB, PRIMARY KEY (model, image))"
            )
        self.model_key = _model_key(model_name)

    @torch.no_grad()
    def embed_images(self, paths: Sequence[Path]) -> tuple[np.ndarray, list[Path]]:
        """L2-normalised embeddings of the readable images (one row each, in order) and the unreadable paths.

        Batched with a progress bar. Decoding and preprocessing (most of the cost for a small encoder or on
        a GPU) run in ``workers`` threads, a few batches ahead of the model; PIL releases the GIL there.
        """
        keys = {str(path): _image_key(path) for path in paths}
        vectors: dict[str, np.ndarray] = {}
        if self._db is not None:
            wanted = list(dict.fromkeys(keys.values()))
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                query = f"SELECT image, vector FROM emb WHERE model = ? AND image IN ({','.join('?' * len(chunk))})"
                for image, blob in self._db.execute(query, (self.model_key, *chunk)):
                    vectors[image] = np.frombuffer(blob, dtype=np.float32)
        todo = [path for path in dict.fromkeys(keys) if keys[path] not in vectors]
        batches = [todo[start : start + self.batch_size] for start in range(0, len(todo), self.batch_size)]
        unreadable: set[str] = set()
        with ThreadPoolExecutor(max_workers=self.workers) as loaders:
            ahead = self.workers + 1
            pending = [loaders.submit(self._prepare, batch) for batch in batches[:ahead]]
            for number in progress_bar(
                range(len(batches)), desc="CLIP image embeddings", unit="batch", disable=not batches
            ):
                good, bad, inputs = pending[number].result()
                pending[number] = None  # free the batch's pixels
                if number + ahead < len(batches):
                    pending.append(loaders.submit(self._prepare, batches[number + ahead]))
                unreadable.update(bad)
                if not good:
                    continue
                features = self.model.get_image_features(**inputs.to(self.device))
                features = torch.nn.functional.normalize(_features(features).float(), dim=-1).cpu().numpy()
                rows = []
                for path, row in zip(good, features):
                    vectors[keys[path]] = row
                    rows.append((self.model_key, keys[path], row.astype(np.float32).tobytes()))
                if self._db is not None:  # committed per batch: an interrupted run keeps what it embedded
                    self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?, ?)", rows)
                    self._db.commit()
        readable = [keys[str(path)] for path in paths if str(path) not in unreadable]
        embeddings = np.stack([vectors[key] for key in readable]) if readable else np.zeros((0, 1), dtype=np.float32)
        return embeddings, [path for path in paths if str(path) in unreadable]

    def _prepare(self, batch: list[str]) -> tuple[list[str], list[str], Any]:
        """Decode and preprocess one batch: (readable paths, unreadable paths, model inputs or None)."""
        loaded = _load_images(batch)
        good = [path for path, image in loaded if image is not None]
        bad = [path for path, image in loaded if image is None]
        inputs = (
            self.processor(images=[image for _, image in loaded if image is not None], return_tensors="pt")
            if good
            else None
        )
        return good, bad, inputs

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised text embeddings, one row per text (kept in memory for the run)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._text_cache]
        for start in range(0, len(todo), 256):
            batch = todo[start : start + 256]
            inputs = self.processor(text=batch, return_tensors="pt", padding=self._text_padding).to(self.device)
            features = torch.nn.functional.normalize(_features(self.model.get_text_features(**inputs)).float(), dim=-1)
            self._text_cache.update(zip(batch, features.cpu().numpy()))
        return np.stack([self._text_cache[t] for t in texts])

    def clip_scores(self, image_embedding: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """CLIPScore (Eq. 1): 100 × cosine similarity of the image and "an image contains {name}"."""
        texts = self.embed_texts([TEXT_TEMPLATE.format(name=n) for n in names])
        return 100.0 * texts @ image_embedding


def _load_images(paths: list[str]) -> list[tuple[str, Image.Image | None]]:
    """Decode images to RGB; an unreadable file gives None (the caller lists and counts it)."""
    loaded: list[tuple[str, Image.Image | None]] = []
    for path in paths:
        try:
            with Image.open(path) as image:
                loaded.append((path, image.convert("RGB")))
        except (OSError, ValueError, Image.DecompressionBombError):
            loaded.append((path, None))
    return loaded


def _image_key(path: Path | str) -> str:
    """Cache key of an image file: its path, size and modification time."""
    try:
        stat = os.stat(path)
    except OSError:
        return str(path)
    return f"{path}|{stat.st_size}|{stat.st_mtime_ns}"


def _model_key(model_name: str) -> str:
    """Cache key of a model: the hub id, or for a local directory its path plus its weights' size and time."""
    ident = str(model_name)
    directory = Path(model_name)
    if directory.is_dir():
        weights = sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin"))
        ident += "".join(f"|{w.name}:{w.stat().st_size}:{w.stat().st_mtime_ns}" for w in weights)
    return hashlib.sha1(ident.encode()).hexdigest()[:16]


def most_similar(
    embeddings: np.ndarray, queries: Sequence[int] | None = None, chunk_size: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """For each query row (default: every row), the index of the most similar *other* row by cosine
    similarity (rows are unit vectors) and that similarity (Alg. 2, step 1: I' minimises 1 - cos).

    Exact: chunked matrix products (``chunk_size`` query rows at a time, so 82,783 candidates need about
    340 MB at once); an exact faiss inner-product index is used instead when faiss is installed and the
    set is large. Ties go to the lowest index.
    """
    n = len(embeddings)
    if n < 2:
        raise UserError("CLIP-guided sampling needs at least two usable images")
    rows_wanted = np.arange(n) if queries is None else np.asarray(queries, dtype=np.int64)
    matrix = np.ascontiguousarray(embeddings, dtype=np.float32)
    if n > 50_000:
        try:
            import faiss  # type: ignore[import-not-found]

            index = faiss.IndexFlatIP(matrix.shape[1])
            index.add(matrix)
            sims, ids = index.search(matrix[rows_wanted], 2)
            pick = np.where(ids[:, 0] == rows_wanted, 1, 0)
            picked = np.arange(len(rows_wanted))
            return ids[picked, pick].astype(np.int64), sims[picked, pick]
        except ImportError:
            pass
    best = np.empty(len(rows_wanted), dtype=np.int64)
    best_sim = np.empty(len(rows_wanted), dtype=np.float32)
    candidates = torch.from_numpy(matrix)
    for start in range(0, len(rows_wanted), chunk_size):
        rows = torch.from_numpy(rows_wanted[start : start + chunk_size])
        sims = candidates[rows] @ candidates.T
        sims[torch.arange(len(rows)), rows] = float("-inf")  # never the image itself
        values, indices = sims.max(dim=1)
        best[start : start + len(rows)] = indices.numpy()
        best_sim[start : start + len(rows)] = values.numpy()
    return best, best_sim
