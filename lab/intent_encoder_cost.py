"""Experiment (docs/intent.md, "A larger encoder"): what a tuned-half encoder costs on this CPU.

For each encoder folder: one training step (batch 32 x 45 word pieces, bf16 autocast, embeddings
frozen, one thread) and one pair's forward pass as per-channel int8 in onnxruntime on one thread
(the shipped runtime), p50 of 50. Random weights in the head: only time is measured.

    .venv/bin/python lab/intent_encoder_cost.py /tmp/all-mpnet-base-v2    # MiniLM is always measured
    .venv/bin/python lab/intent_encoder_cost.py /tmp/all-mpnet-base-v2::6 # its first six layers only
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from intent_larger_encoder import network

import guardian  # noqa: F401  (offline environment defaults)
from guardian.encoding.sentence_encoder import default_model_path


def cost(torch: Any, path: str, layers: int = 0) -> dict[str, float]:
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    net = network(torch, path, 8, layers)  # the experiment's network: embeddings frozen, mean pooling
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=5e-5)
    ids, y = torch.randint(1000, 20000, (32, 45)), torch.randint(0, 8, (32,))
    mask = torch.ones_like(ids)
    steps = []
    for _ in range(6):
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = net(ids, mask)
        torch.nn.functional.cross_entropy(out.float(), y).backward()
        opt.step()
        opt.zero_grad()
        steps.append(time.perf_counter() - t)
    net.eval()
    with tempfile.TemporaryDirectory() as tmp:
        f32, q8 = str(Path(tmp) / "net.onnx"), str(Path(tmp) / "net.int8.onnx")
        with torch.inference_mode():
            torch.onnx.export(net, (ids[:1], mask[:1]), f32, input_names=["ids", "mask"], output_names=["o"],
                              dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}},
                              opset_version=17, dynamo=False)
        quantize_dynamic(f32, q8, weight_type=QuantType.QInt8, per_channel=True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(q8, options, providers=["CPUExecutionProvider"])
        feed = {"ids": ids[:1].numpy(), "mask": mask[:1].numpy()}
        for _ in range(5):
            session.run(None, feed)
        times = []
        for _ in range(50):
            t = time.perf_counter()
            session.run(None, feed)
            times.append(time.perf_counter() - t)
    return {"train_step_s": round(float(np.median(steps[1:])), 3),
            "int8_pair_ms_p50_one_thread": round(1000 * float(np.median(times)), 2)}


def main() -> int:
    import torch

    torch.set_num_threads(1)
    for arg in [str(default_model_path()), *sys.argv[1:]]:
        path, _, layers = arg.partition("::")
        print(json.dumps({"encoder": path, "layers": int(layers or 0), **cost(torch, path, int(layers or 0))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
