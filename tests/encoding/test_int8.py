"""The opt-in int8 sentence encoder (onnxruntime, per-token scales): built once, a vector per text, close to float32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guardian.encoding import minilm_weights, sentence_encoder
from guardian.encoding.sentence_encoder import SentenceEncoder
from guardian.errors import ModelUnavailable

pytestmark = pytest.mark.slow

TEXTS = [
    "I never said that. You're too sensitive.",
    "After all I've done for you, you owe me this.",
    "Okay.",
    "Fine, I'll come at eight.",
    "Can you read me the code we just sent to your phone? It's urgent, your account is being closed today.",
    "If you really loved me you wouldn't even ask where I was last night.",
    "Sure.",
    "Where did you put the keys?",
]


def test_int8_is_a_precision_never_chosen_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_ENCODER_PRECISION", "INT8")
    assert sentence_encoder.default_precision() == "int8"
    monkeypatch.delenv("GUARDIAN_ENCODER_PRECISION")
    assert sentence_encoder.default_precision() in ("float32", "bfloat16")


def test_int8_vectors_depend_on_the_text_only_and_stay_close_to_float32() -> None:
    """onnxruntime's own dynamic quantisation scales a whole batch together, so a text's vector moved with
    its company; with per-token scales a batch gives every text exactly its vector alone."""
    int8 = SentenceEncoder(precision="int8", cache_size=0)
    together = int8.encode([*TEXTS, "Okay.", "Sure."])
    alone = np.vstack([int8.encode([t]) for t in TEXTS])
    assert np.array_equal(together[: len(TEXTS)], alone)
    assert np.array_equal(together[2], together[-2])
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    exact = SentenceEncoder(precision="float32", cache_size=0).encode(TEXTS)
    cosine = np.sum(alone * exact, axis=1)
    assert cosine.min() > 0.95 and cosine.mean() > 0.98, cosine
    assert float(alone[0] @ alone[3]) < 0.9  # still tells different sentences apart


def test_the_int8_file_is_built_once_into_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    path = sentence_encoder.default_model_path()
    SentenceEncoder(precision="int8", cache_size=0).warm_up()
    target = minilm_weights.int8_file(path)
    assert target.is_file() and target.parent.name == "encoder_int8"
    assert not list(target.parent.glob("*.part"))

    def no_export(*_: object) -> None:
        raise AssertionError("exported again although the cached file exists")

    monkeypatch.setattr(minilm_weights, "_export_int8", no_export)
    loaded = minilm_weights.load_int8(path)  # what a new process does
    assert loaded.session is not None and loaded.model is None


def test_a_damaged_cache_file_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_CACHE_DIR", str(tmp_path))
    path = sentence_encoder.default_model_path()
    target = minilm_weights.int8_file(path)
    target.write_bytes(b"not an onnx file")
    with pytest.raises(ModelUnavailable, match=r"could not be opened.*delete it and retry"):
        minilm_weights.load_int8(path)


def test_the_rewrite_needs_a_dynamically_quantised_model() -> None:
    from onnx import TensorProto, helper

    from guardian.encoding.int8 import per_token_scales

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    with pytest.raises(ValueError, match="no DynamicQuantizeLinear"):
        per_token_scales(helper.make_model(graph))
