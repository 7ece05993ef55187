"""The one MiniLM the local, intent and retrieval code share."""

from __future__ import annotations

import numpy as np
import pytest

from guardian.detectors.intent.model import default_encoder
from guardian.encoding import minilm_weights, sentence_encoder
from guardian.encoding.sentence_encoder import SentenceEncoder, shared_encoder
from guardian.errors import ModelUnavailable


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


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_texts_vector_is_exactly_its_vector_alone_in_any_company(precision: sentence_encoder.Precision) -> None:
    """Bit for bit, whatever shares its batch (rows are compared exactly across bulk runs and resumes): on CPUs
    whose kernels reduce a row differently with the batch (bfloat16 with AMX) the encoder goes one text at a time."""
    texts = [f"You said you would call me back by number {i} today." for i in range(40)]  # one token count
    alone = np.vstack([SentenceEncoder(precision=precision, cache_size=0).encode([t]) for t in texts[:3]])
    for n in (2, 3, 6, 17, 40):
        together = SentenceEncoder(precision=precision, cache_size=0).encode(texts[:n])
        assert np.array_equal(together[: min(n, 3)], alone[: min(n, 3)]), n


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_one_text_runs_traced_and_matches_the_eager_batch(precision: sentence_encoder.Precision) -> None:
    """A live turn (one text) goes through the TorchScript trace; its vector is the eager one."""
    encoder = SentenceEncoder(precision=precision, cache_size=0, max_tokens=256)
    texts = ["Fine.", "You're imagining things again, and everyone can see it but you.", "so tired " * 140]
    eager = encoder.encode(texts)  # a padded batch: the eager module
    loaded = minilm_weights.load(encoder.path, precision)
    assert loaded.single is not None  # tracing worked on this machine's torch
    calls = []
    real = loaded.single
    loaded.single = lambda *x: calls.append(x[0].shape) or real(*x)
    try:
        alone = np.vstack([encoder.encode([t]) for t in texts])
    finally:
        loaded.single = real
    assert len(calls) == 3 and calls[2][1] == 256  # every single text took the traced path, long ones cut
    assert np.all(np.sum(alone * eager, axis=1) > 0.9999)


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
    with pytest.raises(ModelUnavailable, match="float32, bfloat16 or int8"):
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


def _in_a_new_thread(fn):  # type: ignore[no-untyped-def]
    import threading

    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def test_a_thread_limited_to_one_torch_thread_leaves_the_others_their_default() -> None:
    """torch's count is per thread, plus a process default that new threads adopt (earlier tests
    may have changed it): neither this thread's count nor that default moves."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from guardian.detectors.intent.model import _linear_pool

    mine, fresh = torch.get_num_threads(), _in_a_new_thread(torch.get_num_threads)
    with ThreadPoolExecutor(max_workers=1) as pool:
        limited = pool.submit(lambda: (sentence_encoder.limit_torch_threads(1), torch.get_num_threads())[1]).result()
        assert limited == 1
        text = "one thread is enough for one turn"
        vector = pool.submit(SentenceEncoder(cache_size=0).encode, [text]).result()
        assert pool.submit(torch.get_num_threads).result() == 1  # it stays limited
    assert torch.get_num_threads() == mine and _in_a_new_thread(torch.get_num_threads) == fresh
    np.testing.assert_allclose(vector, SentenceEncoder(cache_size=0).encode([text]), atol=1e-6)
    assert _linear_pool().submit(torch.get_num_threads).result() == 1  # the intent model's
