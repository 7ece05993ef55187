"""MiniLM utterance embeddings for the local model (the process-wide shared encoder).

The encoder itself lives in `guardian.sentence_encoder` (shared with the intent
detector, so a turn screened by both is embedded once). Training runs also keep
a disk cache (``<cache>/local_model_embeddings``) so that `guardian train` and
cross-validation embed the corpus only once; the file name carries the
precision the vectors were computed in.
"""

from __future__ import annotations

from pathlib import Path

from guardian import locations
from guardian.sentence_encoder import DIM, MODEL_NAME, SentenceEncoder, shared_encoder

MAX_TOKENS = 128

#: The local model's encoder type (kept as a name for the training code and tests).
UtteranceEncoder = SentenceEncoder

__all__ = ["DIM", "MAX_TOKENS", "MODEL_NAME", "UtteranceEncoder", "embedding_cache_file", "shared_encoder"]


def embedding_cache_file(encoder: SentenceEncoder | None = None) -> Path:
    precision = (encoder or shared_encoder()).precision
    return locations.cache_dir() / "local_model_embeddings" / f"{MODEL_NAME}-{MAX_TOKENS}-{precision}.npz"
