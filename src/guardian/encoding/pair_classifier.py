"""A fine-tuned encoder that classifies (text, context) pairs, run as int8 in onnxruntime.

Why in `encoding`: two detectors read pairs this way, the face-act model (utterance | the turns
before it, `guardian.detectors.intent.tuned`) and the turn model's reply head (a chatbot's reply
| the user's message it answers, `guardian.detectors.local.reply_pair`); both need the same export
to int8, cache, save and load, which live here once. The word embeddings stay as shipped in the
encoder's wheel, so a stored model holds only the tuned layers and a small head.

Input: [CLS] text [SEP] context [SEP] (or the encoder's own pair layout), at most `max_len` word
pieces, the context cut first from its end.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, cast

import numpy as np

from guardian._env import apply_process_defaults
from guardian.encoding.encoders import ENCODERS, HIDDEN, EncoderName, encoder_path
from guardian.encoding.int8 import cache_folder, onnxruntime_module, open_session, quiet_root_logger
from guardian.encoding.minilm_weights import quiet_loss_property
from guardian.errors import ModelUnavailable

#: Bump when the ONNX export or the quantisation changes: cached int8 files are then rebuilt.
#: 2: weights on seven bits (`reduce_range`), the same integers on every x86 CPU (see `export_int8`).
RUNTIME_VERSION = 2
#: onnxruntime threads for one pair: one, because the linear half's MiniLM pass runs beside it.
RUNTIME_THREADS = 1


@dataclass(frozen=True, slots=True)
class TuneConfig:
    """How a pair classifier is trained (the defaults: the shipped face-act recipe, docs/intent.md "How it works")."""

    epochs: int = 4
    lr: float = 5e-5
    head_lr: float = 1e-3
    class_weight_power: float = 0.5
    max_len: int = 128
    batch_size: int = 32
    seed: int = 17
    #: What the head reads: the mean over all word pieces ("all"), or over the utterance's own
    #: ("utterance": the context still shapes them through attention, but does not dilute them).
    pooling: Literal["all", "utterance"] = "all"
    #: Which encoder is fine-tuned (`guardian.encoding.encoders`), and how many of its first layers are
    #: kept (0: all): all-mpnet-base-v2 cut to six layers is more accurate than MiniLM but costs
    #: 24 ms per live turn against 10 (docs/history.md, "Intent model").
    encoder: EncoderName = "minilm"
    layers: int = 0
    #: Distillation: a teacher (an encoder and its layer count, as above) is fine-tuned on the same
    #: pairs first, and this model learns from its logits too: `soft_share` of the loss follows the
    #: teacher softened at `temperature`, the rest the gold labels ("" : no teacher).
    teacher: str = ""
    teacher_layers: int = 0
    soft_share: float = 0.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.pooling not in ("all", "utterance"):
            raise ValueError(f"pooling must be 'all' or 'utterance', not {self.pooling!r}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, not {self.encoder!r}")
        if self.layers < 0:
            raise ValueError(f"layers must be 0 (all) or more, not {self.layers}")
        if not 0.0 <= self.soft_share <= 1.0:
            raise ValueError(f"soft_share must be between 0 and 1, not {self.soft_share}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be above 0, not {self.temperature}")
        if self.teacher not in ("", *ENCODERS):
            raise ValueError(f"teacher must be one of {', '.join(ENCODERS)} or empty, not {self.teacher!r}")
        if self.teacher and not self.soft_share:
            raise ValueError("a teacher needs soft_share above 0, or it teaches nothing")

    def teacher_config(self) -> TuneConfig | None:
        """How the teacher is trained: this recipe with the teacher's encoder, and no teacher of its own."""
        if not self.teacher:
            return None
        return replace(self, encoder=cast(EncoderName, self.teacher), layers=self.teacher_layers, teacher="",
                       teacher_layers=0, soft_share=0.0, temperature=1.0)


#: Fields added to TuneConfig after models were first trained and cached: they enter training keys
#: and int8 digests only when set to something other than their default, so those models are still found.
LATER_FIELDS = ("pooling", "encoder", "layers", "teacher", "teacher_layers", "soft_share", "temperature")


def later_fields_set(config: TuneConfig) -> dict[str, Any]:
    return {f: getattr(config, f) for f in LATER_FIELDS if getattr(config, f) != getattr(TuneConfig(), f)}


def softmax(logits: np.ndarray, *, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of `logits / temperature`, computed in float64, returned as float32."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def torch_module() -> Any:
    apply_process_defaults()
    try:
        import torch
    except ImportError:
        raise ModelUnavailable(
            "guardian's fine-tuned models need torch, which is missing; install guardian's "
            "dependencies with `make setup`"
        ) from None
    return torch


def build_network(n_classes: int, config: TuneConfig) -> Any:
    """The configured encoder (its first `layers`) with a mean-pooling linear head (fresh head, shipped layers)."""
    torch = torch_module()
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    path = encoder_path(config.encoder)
    try:
        base = AutoModel.from_pretrained(str(path), local_files_only=True)
    except OSError as exc:
        raise ModelUnavailable(
            f"the {config.encoder} encoder at {path} could not be loaded ({exc}); reinstall its package"
        ) from None
    if config.layers:
        base.encoder.layer = base.encoder.layer[: config.layers]
        base.config.num_hidden_layers = len(base.encoder.layer)
    # BERT-style encoders (MiniLM) read segment ids; MPNet has none and tells the segments apart by its separators.
    segments = "token_type_ids" in inspect.signature(base.forward).parameters
    pooling = config.pooling

    class PairClassifier(torch.nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.base = base
            self.drop = torch.nn.Dropout(0.1)
            self.out = torch.nn.Linear(base.config.hidden_size, n_classes)

        def forward(self, ids: Any, types: Any, mask: Any) -> Any:
            extra = {"token_type_ids": types} if segments else {}
            hidden = self.base(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
            keep = mask * (types == 0).to(mask.dtype) if pooling == "utterance" else mask
            m = keep.unsqueeze(-1).to(hidden.dtype)
            return self.out(self.drop((hidden * m).sum(1) / m.sum(1).clamp(min=1.0)))

    net = PairClassifier()
    quiet_loss_property(net.base)
    for p in net.base.embeddings.parameters():
        p.requires_grad_(False)
    if hasattr(net.base, "pooler") and net.base.pooler is not None:
        for p in net.base.pooler.parameters():
            p.requires_grad_(False)
    return net


def tokenize_pairs(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_len: int) -> tuple[list[list[int]], list[list[int]]]:
    """[CLS] utterance [SEP] context [SEP] (or the encoder's own pair layout), at most `max_len` word pieces.

    The context is cut first (from its end: the oldest turns go), as the tokenizer's
    "only_second" truncation does, but an utterance too long to fit on its own is cut too,
    where that truncation would raise.
    """
    firsts = tokenizer([a for a, _ in pairs], add_special_tokens=False)["input_ids"]
    seconds = tokenizer([b for _, b in pairs], add_special_tokens=False)["input_ids"]
    start, middle, end = pair_markers(tokenizer)
    budget = max(max_len - len(start) - len(middle) - len(end), 2)
    ids: list[list[int]] = []
    types: list[list[int]] = []
    for a, b in zip(firsts, seconds, strict=True):
        a = a[: budget - 1]
        b = b[: budget - len(a)]
        ids.append([*start, *a, *middle, *b, *end])
        first = len(start) + len(a) + 1  # the utterance and the marker that closes it
        types.append([0] * first + [1] * (len(ids[-1]) - first))
    return ids, types


@functools.lru_cache(maxsize=8)
def pair_markers(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The special ids an encoder puts before, between and after a pair's two segments
    (MiniLM: [CLS] / [SEP] / [SEP]; MPNet: <s> / </s></s> / </s>), read off the tokenizer itself,
    once per tokenizer (`tokenize_pairs` runs on every live turn)."""
    (x,), (y,) = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("a", "b"))
    full: list[int] = tokenizer("a", "b")["input_ids"]
    i, j = full.index(x), full.index(y, full.index(x) + 1)
    return tuple(full[:i]), tuple(full[i + 1 : j]), tuple(full[j + 1 :])


def pad(torch: Any, ids: list[list[int]], types: list[list[int]]) -> tuple[Any, Any, Any]:
    width = max(len(x) for x in ids)
    inp = torch.zeros(len(ids), width, dtype=torch.long)
    typ, mask = torch.zeros_like(inp), torch.zeros_like(inp)
    for k, (i, t) in enumerate(zip(ids, types, strict=True)):
        inp[k, : len(i)], typ[k, : len(t)], mask[k, : len(i)] = torch.tensor(i), torch.tensor(t), 1
    return inp, typ, mask


def _onnxruntime(*, exporting: bool = False, what: str = "a fine-tuned pair classifier") -> Any:
    """onnxruntime (and onnx when `exporting`): the shared loader, naming this model when it is missing."""
    return onnxruntime_module(exporting=exporting, what=what)


#: Pairs every fresh int8 file is checked on against float32 (short and long, one over the window).
PROBE_PAIRS: tuple[tuple[str, str], ...] = (
    ("asker: Would you like to help?", "start"),
    ("B: I never said that. You're overreacting, as usual.", "A: You said you'd pick me up at six. I waited an hour."),
    ("A: Send me the report by five today, and do not make me ask again.", "B: Sure, I will look at it after lunch."),
    ("B: " + "Honestly, nobody else would put up with you, and you know it. " * 6, "A: That is not fair."),
)
#: The int8 file must agree with float32 on `PROBE_PAIRS` at least this well: the relative distance
#: |int8 - float32| / max(|float32|, 1) of the output vectors (logits or pooled vectors), averaged over the
#: probes, at most this much. Measured on the bundled halves: .04-.18 with seven-bit weights; .87 and
#: 1.59 for the mpnet-6 halves with eight-bit weights on an AVX2 CPU, whose integer sums overflowed.
MAX_INT8_DRIFT = 0.5


class Int8Mismatch(Exception):
    """The int8 file disagrees with the float32 network it was made from (`build_and_open` says so in one sentence)."""


def export_int8(net: Any, tokenizer: Any, max_len: int, target: Path) -> None:
    """`net` (float32) -> ONNX -> dynamically quantised int8 ONNX at `target` (written atomically), checked
    against `net` on `PROBE_PAIRS` before it is kept.

    Why `reduce_range` (weights on seven bits): onnxruntime multiplies uint8 activations by int8 weights
    with an instruction that adds pairs of products into 16 bits on x86 CPUs without VNNI (AVX2 only),
    and 255 x 127 x 2 overflows it. The fine-tuned mpnet-6 halves then gave logits off by about 3 and
    everyday accuracy fell from .66 to .41 on such a CPU (docs/history.md, "Intent model");
    with seven-bit weights no sum can overflow, so every x86 CPU computes the same integers.
    """
    torch = torch_module()
    _onnxruntime(exporting=True)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    example = pad(torch, *tokenize_pairs(tokenizer, [PROBE_PAIRS[0]], max_len))
    axes = {"ids": {0: "batch", 1: "tokens"}, "types": {0: "batch", 1: "tokens"}, "mask": {0: "batch", 1: "tokens"}}
    part = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.part")
    with tempfile.TemporaryDirectory(prefix="guardian-pairs-") as tmp, warnings.catch_warnings():
        # The exporter warns about deprecations and shapes it fixes; the file is checked by use.
        warnings.simplefilter("ignore")
        exported = Path(tmp) / "tuned.onnx"
        with torch.inference_mode():
            torch.onnx.export(
                net, example, str(exported), input_names=["ids", "types", "mask"], output_names=["logits"],
                dynamic_axes=axes, opset_version=17, dynamo=False,
            )
        try:
            with quiet_root_logger():  # the quantiser logs advice to the root logger (stderr)
                quantize_dynamic(str(exported), str(part), weight_type=QuantType.QInt8, per_channel=True,
                                 reduce_range=True)
            drift = int8_drift(torch, net, tokenizer, max_len, part)
            if drift > MAX_INT8_DRIFT:
                raise Int8Mismatch(f"mean relative drift {drift:.2f} on the probe pairs, at most {MAX_INT8_DRIFT}")
            part.replace(target)
        finally:
            part.unlink(missing_ok=True)


def int8_drift(torch: Any, net: Any, tokenizer: Any, max_len: int, path: Path) -> float:
    """The mean relative distance between the outputs of the int8 file at `path` and `net` over `PROBE_PAIRS`."""
    session = open_session(path)
    inputs = {i.name for i in session.get_inputs()}
    ids, types = tokenize_pairs(tokenizer, list(PROBE_PAIRS), max_len)
    drifts = []
    for i, t in zip(ids, types, strict=True):
        with torch.inference_mode():
            exact = net(*pad(torch, [i], [t]))[0].float().numpy()
        feed = {"ids": np.array([i], dtype=np.int64), "types": np.array([t], dtype=np.int64),
                "mask": np.ones((1, len(i)), dtype=np.int64)}
        fast = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0][0]
        # Relative, but absolute under a norm of 1: a barely trained head's near-zero logits are not a mismatch.
        drifts.append(float(np.linalg.norm(fast - exact) / max(float(np.linalg.norm(exact)), 1.0)))
    return float(np.mean(drifts))


def build_and_open(target: Path, build: Callable[[], None], *, what: str, disable: str, threads: int) -> Any:
    """An onnxruntime session on the int8 file `target`, built first by `build` when it is not cached;
    each failure one sentence (`ModelUnavailable`) naming `what` and what to do."""
    if not target.is_file():
        try:
            build()
        except ModelUnavailable:
            raise
        except Int8Mismatch as exc:
            raise ModelUnavailable(
                f"the int8 copy of {what} disagrees with its float32 weights on this CPU ({exc}); "
                f"report it with your CPU model and onnxruntime version, or {disable}"
            ) from None
        except Exception as exc:  # exporter, quantiser or disk: one sentence, not a traceback
            raise ModelUnavailable(
                f"could not build the int8 copy of {what} in {target.parent} "
                f"({type(exc).__name__}: {exc}); free disk space or {disable}"
            ) from None
    try:
        # Worker threads that do not spin after a run: they would hold a core the next turn's MiniLM passes need.
        return open_session(target, threads=threads)
    except Exception as exc:  # a damaged cache file: say where it is
        raise ModelUnavailable(
            f"the cached int8 copy of {what} ({target}) could not be opened ({exc}); delete it and retry"
        ) from None


class PairClassifier:
    """A fine-tuned pair classifier: `predict_proba` over `classes` for (text, context) pairs.

    It runs as int8 in onnxruntime, one pair at a time. Why int8: a live turn's pass over
    the utterance and its context (45 word pieces on average) takes 5.0 ms on one core
    against 11.4 ms in float32 and 8-12 ms in bf16 torch on two, and the pooled
    out-of-fold accuracy it costs is about one verdict in 1,000 (docs/history.md, "Intent model"). Why one pair at a time:
    dynamic quantisation scales a whole input tensor, so padding in a batch would shift a
    pair's probabilities; singly, `guardian eval` scores exactly what a live turn gets.
    The int8 file is built from the weights on first use (a few seconds) and cached.
    """

    #: How errors name the model, how to rebuild it, and how to do without it (one sentence each).
    what: ClassVar[str] = "the fine-tuned pair classifier"
    rebuild: ClassVar[str] = "retrain the model that holds it"
    disable: ClassVar[str] = "turn the model off in the settings"
    #: The cache folder of the int8 files (named by digest, so models never share a file).
    cache: ClassVar[str] = "pair_int8"

    @classmethod
    def class_of(cls, name: str) -> Any:
        """A stored class name as the model's class (subclasses: their enum)."""
        return name

    def __init__(
        self,
        *,
        classes: Sequence[Any],
        layers: dict[str, np.ndarray],
        head_weight: np.ndarray,
        head_bias: np.ndarray,
        config: TuneConfig,
        threads: int = RUNTIME_THREADS,
        max_len: int | None = None,
    ) -> None:
        self.classes: list[Any] = list(classes)
        self.threads = threads
        #: Word pieces read per pair at run time (default: as trained); the escalation half reads fewer.
        self.max_len = max_len or config.max_len
        self.layers = layers
        self.head_weight = head_weight
        self.head_bias = head_bias
        self.config = config
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_network(cls, net: Any, classes: Sequence[Any], config: TuneConfig) -> Self:
        # Rounded to float16 as `save` stores them, so a model just trained predicts exactly
        # what it will after a save and load (and what cross-validation measured).
        layers = {
            k: v.detach().float().numpy().astype(np.float16).astype(np.float32)
            for k, v in net.base.encoder.state_dict().items()
        }
        return cls(
            classes=classes, layers=layers, head_weight=net.out.weight.detach().float().numpy().copy(),
            head_bias=net.out.bias.detach().float().numpy().copy(), config=config,
        )

    def network(self) -> Any:
        """The float32 torch network with these weights (what the int8 file is made from)."""
        torch = torch_module()
        net = build_network(len(self.classes), self.config)
        state = {k: torch.from_numpy(v.astype(np.float32)) for k, v in self.layers.items()}
        missing, unexpected = net.base.encoder.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ModelUnavailable(
                f"the layers of {self.what} do not fit the {self.config.encoder} encoder; {self.rebuild}"
            )
        with torch.no_grad():
            net.out.weight.copy_(torch.from_numpy(self.head_weight.astype(np.float32)))
            net.out.bias.copy_(torch.from_numpy(self.head_bias.astype(np.float32)))
        return net.eval()

    def digest(self) -> str:
        """Names the int8 file: the weights, the input length and the runtime that quantised them."""
        ort = _onnxruntime()
        h = hashlib.sha256(f"{RUNTIME_VERSION}|{ort.__version__}|{self.max_len}|".encode())
        for field, value in later_fields_set(self.config).items():
            h.update(f"{field}={value}|".encode())
        h.update("|".join(str(c) for c in self.classes).encode())
        for key in sorted(self.layers):
            h.update(key.encode())
            h.update(np.ascontiguousarray(self.layers[key], dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(self.head_weight, dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(self.head_bias, dtype=np.float32).tobytes())
        return h.hexdigest()[:24]

    def prepare(self) -> None:
        """Build (or find in the cache) the int8 model and open it; done once, before any thread needs it."""
        with self._lock:
            if self._session is not None:
                return
            _onnxruntime(what=self.what)
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(encoder_path(self.config.encoder)), local_files_only=True)
            target = cache_folder(self.cache) / f"{self.digest()}.int8.onnx"
            self._session = build_and_open(
                target, lambda: export_int8(self.network(), tokenizer, self.max_len, target),
                what=self.what, disable=self.disable, threads=self.threads,
            )
            self._tokenizer = tokenizer
            self._inputs = {i.name for i in self._session.get_inputs()}

    def predict_proba(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(n, classes) probabilities for `pair_text` pairs."""
        return softmax(self.logits(pairs))

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(n, classes) logits for `pair_text` pairs (what a student model learns from)."""
        out = np.zeros((len(pairs), len(self.classes)), dtype=np.float64)
        if not pairs:
            return out
        self.prepare()
        with self._lock:  # a fast tokenizer is not safe to call from two threads at once
            ids, types = tokenize_pairs(self._tokenizer, pairs, self.max_len)
        for k, (i, t) in enumerate(zip(ids, types, strict=True)):
            feed = {
                "ids": np.array([i], dtype=np.int64),
                "types": np.array([t], dtype=np.int64),
                "mask": np.ones((1, len(i)), dtype=np.int64),
            }
            # The exporter drops an input the graph never reads (segment ids, for MPNet pooling over all pieces).
            out[k] = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0][0]
        return out

    # -- persistence (plain arrays, no pickle) --

    def save(self, directory: Path, *, file: str, int8: bool = False) -> None:
        """Weights as float16, or with `int8` each layer's weight matrices as int8 per output row plus a
        scale (half the size: 43 MB for mpnet-6). The scheme is onnxruntime's per-channel symmetric one
        (scale = max |w| / 127 per output channel); since RUNTIME_VERSION 2 the runtime re-quantises the
        stored values to seven bits (`export_int8`), within one step of what it makes of the float weights;
        other parameters (biases, norms, MPNet's relative-position table) stay float16."""
        directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        for k, v in self.layers.items():
            if int8 and v.ndim == 2 and k.startswith("layer."):
                scale = np.maximum(np.abs(v).max(axis=1), 1e-12).astype(np.float32) / 127.0
                arrays[f"q:{k}"] = np.clip(np.round(v / scale[:, None]), -127, 127).astype(np.int8)
                arrays[f"s:{k}"] = scale
            else:
                arrays[f"layer:{k}"] = v.astype(np.float16)
        arrays["head_weight"] = self.head_weight.astype(np.float32)
        arrays["head_bias"] = self.head_bias.astype(np.float32)
        arrays["classes"] = np.array([str(c) for c in self.classes])
        arrays["config"] = np.array([f"{k}={v}" for k, v in asdict(self.config).items()])
        np.savez(directory / file, **arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, directory: Path, *, file: str) -> Self:
        try:
            with np.load(directory / file, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            classes = [cls.class_of(str(c)) for c in arrays["classes"]]
            fields = {f: type(getattr(TuneConfig(), f)) for f in TuneConfig.__dataclass_fields__}
            given = dict(str(x).split("=", 1) for x in arrays["config"])
            config = TuneConfig(**{k: fields[k](v) for k, v in given.items() if k in fields})
            layers = {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("layer:")}
            for k, q in arrays.items():
                if k.startswith("q:"):
                    name = k.split(":", 1)[1]
                    layers[name] = q.astype(np.float32) * arrays[f"s:{name}"].astype(np.float32)[:, None]
            head_weight, head_bias = arrays["head_weight"], arrays["head_bias"]
            if head_weight.shape != (len(classes), HIDDEN[config.encoder]) or head_bias.shape != (len(classes),) or not layers:
                raise ValueError("the tuned head does not match its classes")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelUnavailable(
                f"{cls.what} ({directory / file}) is missing or unreadable ({exc}); {cls.rebuild}"
            ) from exc
        return cls(classes=classes, layers=layers, head_weight=head_weight, head_bias=head_bias, config=config)
