"""Features of the local manipulation model, built one way for training, evaluation and inference.

Speakers are renamed ``Person1``/``Person2``... in order of first appearance, the
layout of MentalManip, so that a live chat between "Alice" and "Bob" looks to the
model like the dialogues it learnt from (names never become features).

The text featurizer (word and character n-gram TF-IDF) is stored as plain JSON
(vocabularies) and NumPy arrays (idf weights), never as a pickle. Extra dense
columns (for instance a teammate's intent features) go through `build_features`
so that an ablation is measured with exactly the same pipeline and folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from guardian.conversation import Conversation

if TYPE_CHECKING:
    from guardian.detectors.local_encoder import UtteranceEncoder

#: Cap on characters per dialogue fed to the featurizer (a 10-turn window is far below it).
MAX_CHARS = 20_000


def speaker_ranks(conversation: Conversation) -> dict[str, int]:
    """0 for the first speaker, 1 for the second... (the `PersonN` a speaker becomes)."""
    return {s: i for i, s in enumerate(conversation.speakers)}


def dialogue_text(conversation: Conversation) -> str:
    """The window as MentalManip-style lines with speaker names replaced by ``PersonN``."""
    ranks = speaker_ranks(conversation)
    text = "\n".join(f"Person{ranks[t.speaker] + 1}: {t.text}" for t in conversation.turns)
    return text[-MAX_CHARS:]


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """Shape of the TF-IDF features (the defaults are the ones measured in docs/model-card.md)."""

    word_ngrams: tuple[int, int] = (1, 2)
    char_ngrams: tuple[int, int] = (2, 5)
    min_df: int = 2
    max_word_features: int = 60_000
    max_char_features: int = 100_000

    def as_dict(self) -> dict[str, Any]:
        return {
            "word_ngrams": list(self.word_ngrams),
            "char_ngrams": list(self.char_ngrams),
            "min_df": self.min_df,
            "max_word_features": self.max_word_features,
            "max_char_features": self.max_char_features,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureConfig:
        return cls(
            word_ngrams=(int(data["word_ngrams"][0]), int(data["word_ngrams"][1])),
            char_ngrams=(int(data["char_ngrams"][0]), int(data["char_ngrams"][1])),
            min_df=int(data["min_df"]),
            max_word_features=int(data["max_word_features"]),
            max_char_features=int(data["max_char_features"]),
        )


@dataclass
class TextFeaturizer:
    """Word + character n-gram TF-IDF, fitted on training dialogues only."""

    config: FeatureConfig = field(default_factory=FeatureConfig)
    _word: Any = None
    _char: Any = None

    def _vectorizers(self) -> tuple[Any, Any]:
        from sklearn.feature_extraction.text import TfidfVectorizer

        c = self.config
        word = TfidfVectorizer(
            ngram_range=c.word_ngrams,
            min_df=c.min_df,
            sublinear_tf=True,
            max_features=c.max_word_features,
            dtype=np.float32,
        )
        char = TfidfVectorizer(
            analyzer="char_wb",
            ngram_range=c.char_ngrams,
            min_df=c.min_df,
            sublinear_tf=True,
            max_features=c.max_char_features,
            dtype=np.float32,
        )
        return word, char

    def fit(self, texts: Sequence[str]) -> TextFeaturizer:
        self._word, self._char = self._vectorizers()
        self._word.fit(texts)
        self._char.fit(texts)
        return self

    @property
    def fitted(self) -> bool:
        return self._word is not None

    @property
    def n_features(self) -> int:
        if not self.fitted:
            return 0
        return len(self._word.vocabulary_) + len(self._char.vocabulary_)

    def transform(self, texts: Sequence[str]) -> sparse.csr_matrix:
        if not self.fitted:
            raise RuntimeError("featurizer used before fit")
        return sparse.hstack([self._word.transform(texts), self._char.transform(texts)], format="csr")

    # -- storage as JSON + arrays (no pickle) ----------------------------------------------------

    def export(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able vocabularies and config, arrays) for the artifact."""
        if not self.fitted:
            raise RuntimeError("featurizer exported before fit")
        meta = {
            "config": self.config.as_dict(),
            "word_vocabulary": _ordered_vocabulary(self._word.vocabulary_),
            "char_vocabulary": _ordered_vocabulary(self._char.vocabulary_),
        }
        arrays = {
            "word_idf": self._word.idf_.astype(np.float32),
            "char_idf": self._char.idf_.astype(np.float32),
        }
        return meta, arrays

    @classmethod
    def restore(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> TextFeaturizer:
        featurizer = cls(config=FeatureConfig.from_dict(meta["config"]))
        word, char = featurizer._vectorizers()
        word.set_params(vocabulary={t: i for i, t in enumerate(meta["word_vocabulary"])})
        char.set_params(vocabulary={t: i for i, t in enumerate(meta["char_vocabulary"])})
        # Fitting on an empty corpus only validates the fixed vocabulary; the idf comes from the artifact.
        word.fit([""])
        char.fit([""])
        word.idf_ = np.asarray(arrays["word_idf"], dtype=np.float64)
        char.idf_ = np.asarray(arrays["char_idf"], dtype=np.float64)
        featurizer._word, featurizer._char = word, char
        return featurizer


def _ordered_vocabulary(vocabulary: dict[str, int]) -> list[str]:
    terms = [""] * len(vocabulary)
    for term, index in vocabulary.items():
        terms[index] = term
    return terms


def build_features(
    conversations: Sequence[Conversation],
    *,
    featurizer: TextFeaturizer,
    extra: np.ndarray | None = None,
    extra_weight: float = 1.0,
) -> sparse.csr_matrix:
    """The model's input matrix for `conversations` (one row each).

    `extra` appends dense per-conversation columns (scaled by `extra_weight`), the
    hook for measuring whether other signals (intent/face-act features) help.
    """
    x = featurizer.transform([dialogue_text(c) for c in conversations])
    if extra is None:
        return x
    extra = np.asarray(extra, dtype=np.float32)
    if extra.shape[0] != x.shape[0]:
        raise ValueError("extra features need one row per conversation")
    return sparse.hstack([x, sparse.csr_matrix(extra * extra_weight)], format="csr")


#: Width of `embedding_features`: mean and max over all utterances, mean of Person1's, mean of Person2's.
EMBEDDING_BLOCKS = 4


def embedding_features(conversations: Sequence[Conversation], *, encoder: UtteranceEncoder) -> np.ndarray:
    """Speaker-aware pooling of utterance embeddings: (n, 4 * 384) float32.

    Utterances are embedded one by one (so a live window re-uses cached turns);
    a speaker with no turn in the window contributes zeros.
    """
    texts = [t.text for c in conversations for t in c.turns]
    vectors = encoder.encode(texts) if texts else np.zeros((0, 0), np.float32)
    dim = vectors.shape[1] if len(texts) else 384
    out = np.zeros((len(conversations), EMBEDDING_BLOCKS * dim), dtype=np.float32)
    pos = 0
    for n, conversation in enumerate(conversations):
        count = len(conversation.turns)
        if count == 0:
            continue
        e = vectors[pos : pos + count]
        pos += count
        ranks = speaker_ranks(conversation)
        who = np.array([ranks[t.speaker] for t in conversation.turns])
        blocks = [e.mean(0), e.max(0)]
        for rank in (0, 1):
            mine = e[who == rank]
            blocks.append(mine.mean(0) if len(mine) else np.zeros(dim, np.float32))
        out[n] = np.concatenate(blocks)
    return out
