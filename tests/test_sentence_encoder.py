"""The one MiniLM the local, intent and retrieval code share."""

from __future__ import annotations

import numpy as np
import pytest

from guardian import sentence_encoder
from guardian.detectors.intent_model import default_encoder
from guardian.detectors.local_encoder import shared_encoder
from guardian.errors import ModelUnavailable
from guardian.sentence_encoder import SentenceEncoder


def test_local_and_intent_share_one_cache() -> None:
    assert default_encoder() is shared_encoder()


def test_vectors_are_unit_length_cached_and_batch_independent() -> None:
    encoder = SentenceEncoder(cache_size=16)
    texts = ["You're imagining things again.", "", "Fine, I'll come at eight.", "You're imagining things again."]
    batch = encoder.encode(texts)
    assert batch.shape == (4, sentence_encoder.DIM)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(batch[0], batch[3])
    alone = SentenceEncoder(cache_size=0).encode([texts[2]])[0]
    assert float(alone @ batch[2]) > 0.999  # padding in a batch does not change a sentence's vector
    assert float(batch[0] @ batch[2]) < 0.9


def test_bfloat16_agrees_with_float32() -> None:
    """bfloat16 is only chosen because its vectors are interchangeable with float32 ones."""
    texts = ["I never said that. You're too sensitive.", "After all I've done for you, you owe me this."]
    exact = SentenceEncoder(precision="float32", cache_size=0).encode(texts)
    fast = SentenceEncoder(precision="bfloat16", cache_size=0).encode(texts)
    assert np.all(np.sum(exact * fast, axis=1) > 0.999)


def test_left_truncation_keeps_the_end() -> None:
    long = "filler words here. " * 200 + "The last sentence matters."
    left = SentenceEncoder(max_tokens=32, truncation="left", cache_size=0).encode([long])[0]
    right = SentenceEncoder(max_tokens=32, truncation="right", cache_size=0).encode([long])[0]
    end = SentenceEncoder(max_tokens=32, cache_size=0).encode(["The last sentence matters."])[0]
    assert float(left @ end) > float(right @ end)


def test_unknown_precision_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_ENCODER_PRECISION", "int3")
    with pytest.raises(ModelUnavailable, match="float32 or bfloat16"):
        sentence_encoder.default_precision()
    monkeypatch.setenv("GUARDIAN_ENCODER_PRECISION", "FP32")
    assert sentence_encoder.default_precision() == "float32"


def test_disk_cache_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    encoder = SentenceEncoder(cache_size=8)
    vectors = encoder.encode(["one utterance", "another one"])
    encoder.persist(tmp_path / "cache.npz")
    again = SentenceEncoder(cache_size=8)
    again.preload(tmp_path / "cache.npz")
    again._embed = None  # type: ignore[assignment, method-assign]  # any re-encoding would fail
    assert np.array_equal(again.encode(["another one", "one utterance"]), vectors[::-1])
    SentenceEncoder().preload(tmp_path / "missing.npz")  # unreadable cache: ignored
