"""The face-act model's features: what the linear half and the everyday head read of an utterance.

Split out of `model` so that the everyday head (`domain`) and the model share them
without importing each other: an utterance in context, its structural features, TF-IDF n-grams
rebuilt from a saved vocabulary (no pickle), and the one design matrix both linear models use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardian.encoding.sentence_encoder import SentenceEncoder

ENCODER_DIM = 384
CONTEXT = 2  # previous utterances encoded as context

# The n-gram vocabularies: word 1-2 grams, and side-tagged unigrams (see `side_text`).
# (Character n-grams were tried and did not help: 0.667 vs 0.672 accuracy in CV.)
WORD_PARAMS: dict[str, Any] = {"analyzer": "word", "ngram_range": (1, 2), "lowercase": True,
                               "token_pattern": r"(?u)\b\w+\b|[?!]"}
SIDE_PARAMS: dict[str, Any] = {"analyzer": "word", "ngram_range": (1, 1), "lowercase": True,
                               "token_pattern": r"\S+"}


# --- features --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Utterance:
    """One utterance in context: what the featuriser needs, nothing dataset-specific."""

    text: str
    speaker: str
    context: tuple[tuple[str, str], ...]  # (speaker, text) of up to CONTEXT previous utterances, oldest first
    opener: bool  # the speaker opened the conversation (the asking side in a request setting)
    position: int  # index in the conversation


def structural_features(u: Utterance) -> np.ndarray:
    """Small hand-made features: who spoke before, where we are, question marks."""
    prev = list(reversed(u.context))
    feats = [
        1.0 if u.opener else 0.0,
        min(u.position, 40) / 40.0,
        1.0 if u.position == 0 else 0.0,
        1.0 if "?" in u.text else 0.0,
        min(len(u.text.split()), 40) / 40.0,
    ]
    for k in range(CONTEXT):
        if k < len(prev):
            speaker, text = prev[k]
            feats += [1.0, 1.0 if speaker == u.speaker else 0.0, 1.0 if "?" in text else 0.0]
        else:
            feats += [0.0, 0.0, 0.0]
    return np.asarray(feats, dtype=np.float32)


class NGrams:
    """TF-IDF n-grams rebuilt from a saved vocabulary and idf (scikit-learn's analyzer, no pickle)."""

    def __init__(self, params: dict[str, Any], vocabulary: dict[str, int], idf: np.ndarray) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.params = params
        self.vocabulary = vocabulary
        self.idf = idf.astype(np.float32)
        self._analyze = TfidfVectorizer(**params).build_analyzer()

    @classmethod
    def fit(cls, texts: Sequence[str], params: dict[str, Any], *, min_df: int = 2) -> NGrams:
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(**params, min_df=min_df, sublinear_tf=True)
        vec.fit(texts)
        vocab = {str(k): int(v) for k, v in vec.vocabulary_.items()}
        return cls(params, vocab, np.asarray(vec.idf_))

    def transform(self, texts: Sequence[str]) -> Any:
        """Sparse (n, |V|) sublinear tf-idf, L2-normalised rows."""
        from scipy.sparse import csr_matrix

        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for r, text in enumerate(texts):
            counts: dict[int, int] = {}
            for gram in self._analyze(text):
                j = self.vocabulary.get(gram)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            weights = {j: (1.0 + math.log(c)) * float(self.idf[j]) for j, c in counts.items()}
            norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
            for j, w in weights.items():
                rows.append(r)
                cols.append(j)
                vals.append(w / norm)
        return csr_matrix((vals, (rows, cols)), shape=(len(texts), len(self.vocabulary)), dtype=np.float32)


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """How strongly each block enters the linear model (blocks are concatenated, then weighted)."""

    dense_weight: float = 1.0
    context_weight: float = 0.6
    struct_weight: float = 1.0
    word_weight: float = 1.0
    side_weight: float = 1.0
    C: float = 2.0


def side_text(u: Utterance) -> str:
    """The utterance's words tagged with the speaker's side (opener or not) for side-specific unigrams."""
    tag = "o_" if u.opener else "r_"
    return " ".join(tag + w for w in u.text.lower().split())


def assemble(
    utterances: Sequence[Utterance], u_vecs: np.ndarray, ctx_vecs: np.ndarray, word: Any, side: Any,
    cfg: FeatureConfig,
) -> Any:
    """One sparse design matrix from the blocks (same code path in training and at run time)."""
    from scipy.sparse import csr_matrix, hstack

    opener = np.array([[1.0 if u.opener else 0.0] for u in utterances], dtype=np.float32)
    struct = np.vstack([structural_features(u) for u in utterances])
    dense = np.hstack([
        u_vecs * cfg.dense_weight, u_vecs * opener * cfg.dense_weight,
        ctx_vecs * cfg.context_weight, ctx_vecs * opener * cfg.context_weight,
        struct * cfg.struct_weight,
    ])
    return hstack([csr_matrix(dense), word * cfg.word_weight, side * cfg.side_weight], format="csr")


DENSE_DIM = 2 * ENCODER_DIM * (1 + CONTEXT) + 5 + 3 * CONTEXT


def context_vectors(encoder: SentenceEncoder, utterances: Sequence[Utterance]) -> np.ndarray:
    """(n, CONTEXT*384): vectors of the previous utterances, newest first, zeros where absent."""
    out = np.zeros((len(utterances), CONTEXT * ENCODER_DIM), dtype=np.float32)
    needed = list({t for u in utterances for _, t in u.context})
    vecs = dict(zip(needed, encoder.encode(needed), strict=True)) if needed else {}
    for i, u in enumerate(utterances):
        for k, (_, text) in enumerate(reversed(u.context)):
            out[i, k * ENCODER_DIM : (k + 1) * ENCODER_DIM] = vecs[text]
    return out


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
