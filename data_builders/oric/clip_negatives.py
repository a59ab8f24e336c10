"""CLIP-guided negative sampling (ORIC Alg. 2): for each image find its most similar other image I' by
cosine similarity of CLIP image embeddings, then rank classes absent from I' by
CLIPScore(I', "an image contains {name}") (Eq. 1) and keep the top k.

Image embeddings are computed in batches with a progress bar and cached in SQLite per (model, image), so
an interrupted build resumes and a rerun embeds nothing twice.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from veritune.errors import UserError

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch32"  # the encoder of the public ORIC builder
TEXT_TEMPLATE = "an image contains {name}"


def _features(output: object) -> torch.Tensor:
    """transformers 5 returns a model output from ``get_*_features``; older versions a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output  # type: ignore[attr-defined]


class ClipScorer:
    """Embeds images and texts with a CLIP-family model (any transformers CLIP/SigLIP id or directory)."""

    def __init__(self, model_name: str, cache_dir: str | Path | None = None, device: str | None = None, batch_size: int = 64):
        from transformers import AutoModel, AutoProcessor

        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.model = AutoModel.from_pretrained(model_name).to(self.device).eval()
            self.processor = AutoProcessor.from_pretrained(model_name)
        except OSError as err:
            raise UserError(f"--clip-model: cannot load {model_name!r} ({str(err).splitlines()[0]})") from None
        self._text_cache: dict[str, np.ndarray] = {}
        self._db = None
        if cache_dir is not None:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(Path(cache_dir) / "clip_embeddings.sqlite")
            self._db.execute("CREATE TABLE IF NOT EXISTS emb (model TEXT, image TEXT, vector BLOB, PRIMARY KEY (model, image))")
        self.model_key = hashlib.sha1(str(model_name).encode()).hexdigest()[:16]

    @torch.no_grad()
    def embed_images(self, paths: Sequence[Path]) -> np.ndarray:
        """L2-normalised image embeddings, one row per path (cached per model and image path)."""
        vectors: dict[str, np.ndarray] = {}
        keys = [str(p) for p in paths]
        if self._db is not None:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT image, vector FROM emb WHERE model = ? AND image IN ({marks})"
                for image, blob in self._db.execute(query, (self.model_key, *chunk)):
                    vectors[image] = np.frombuffer(blob, dtype=np.float32)
        todo = [k for k in dict.fromkeys(keys) if k not in vectors]
        for start in tqdm(range(0, len(todo), self.batch_size), desc="CLIP image embeddings", unit="batch", disable=not todo):
            batch = todo[start : start + self.batch_size]
            images = []
            for key in batch:
                with Image.open(key) as image:
                    images.append(image.convert("RGB"))
            inputs = self.processor(images=images, return_tensors="pt").to(self.device)
            features = torch.nn.functional.normalize(_features(self.model.get_image_features(**inputs)).float(), dim=-1)
            for key, row in zip(batch, features.cpu().numpy()):
                vectors[key] = row
            if self._db is not None:
                rows = [(self.model_key, key, vectors[key].astype(np.float32).tobytes()) for key in batch]
                self._db.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?, ?)", rows)
                self._db.commit()
        return np.stack([vectors[k] for k in keys]) if keys else np.zeros((0, 1), dtype=np.float32)

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._text_cache]
        for start in range(0, len(todo), 256):
            batch = todo[start : start + 256]
            inputs = self.processor(text=batch, return_tensors="pt", padding=True).to(self.device)
            features = torch.nn.functional.normalize(_features(self.model.get_text_features(**inputs)).float(), dim=-1)
            self._text_cache.update(zip(batch, features.cpu().numpy()))
        return np.stack([self._text_cache[t] for t in texts])

    def clip_scores(self, image_embedding: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """CLIPScore (Eq. 1): 100 × cosine similarity of the image and "an image contains {name}"."""
        texts = self.embed_texts([TEXT_TEMPLATE.format(name=n) for n in names])
        return 100.0 * texts @ image_embedding


def most_similar(embeddings: np.ndarray, chunk_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the index of the most similar other row by cosine similarity (rows are unit vectors),
    and that similarity. Exact: chunked matrix products; faiss is used instead when installed and the set
    is large."""
    n = len(embeddings)
    if n < 2:
        raise UserError("CLIP-guided sampling needs at least two usable images")
    if n > 50_000:
        try:
            import faiss  # type: ignore[import-not-found]

            index = faiss.IndexFlatIP(embeddings.shape[1])
            index.add(embeddings.astype(np.float32))
            sims, ids = index.search(embeddings.astype(np.float32), 2)
            pick = np.where(ids[:, 0] == np.arange(n), 1, 0)
            return ids[np.arange(n), pick], sims[np.arange(n), pick]
        except ImportError:
            pass
    best = np.empty(n, dtype=np.int64)
    best_sim = np.empty(n, dtype=np.float32)
    matrix = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
    for start in range(0, n, chunk_size):
        sims = matrix[start : start + chunk_size] @ matrix.T
        rows = torch.arange(sims.shape[0])
        sims[rows, rows + start] = float("-inf")  # never the image itself
        values, indices = sims.max(dim=1)
        best[start : start + len(rows)] = indices.numpy()
        best_sim[start : start + len(rows)] = values.numpy()
    return best, best_sim
