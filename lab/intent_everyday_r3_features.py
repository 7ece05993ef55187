"""Round 3 of the everyday face-act experiment (issue 25), stage 1: every array the later stages read.

For all 1,454 rows of the everyday set: the shipped model's final probabilities (fed in turn order
with one domain state and escalation budget per conversation, exactly what `guardian eval faceacts`
scores), each of its parts on its own (persuasion linear half, everyday head, gate logit, persuasion
MiniLM half, everyday MiniLM half, mpnet-6 escalation half), the MiniLM vectors the heads read, and
frozen all-mpnet-base-v2 vectors (mean-pooled, L2-normalised; after its 6th and its 12th layer) of
each utterance and of the turn before it. The test rows are computed too but only read by the
final, single scoring (`lab/intent_everyday_r3_cv.py --test`).
Usage: python lab/intent_everyday_r3_features.py OUT.npz
"""

from __future__ import annotations

import sys
import time

import numpy as np

from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.model import context_vectors, load_model
from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context
from guardian.detectors.intent.tuned import pair_text
from guardian.encoding.encoders import encoder_path

EVERYDAY = "data/faceacts/everyday.csv"


def mpnet_vectors(texts: list[str], *, batch: int = 32) -> dict[str, np.ndarray]:
    """Frozen all-mpnet-base-v2 sentence vectors after layer 6 and layer 12 ("" -> zeros)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = str(encoder_path("mpnet"))
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    net = AutoModel.from_pretrained(path, local_files_only=True).eval()
    out = {6: np.zeros((len(texts), 768), np.float32), 12: np.zeros((len(texts), 768), np.float32)}
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    with torch.inference_mode():
        for s in range(0, len(order), batch):
            idx = [i for i in order[s:s + batch] if texts[i].strip()]
            if not idx:
                continue
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=128, return_tensors="pt")
            hidden = net(**enc, output_hidden_states=True).hidden_states
            mask = enc["attention_mask"].unsqueeze(-1).float()
            for layer in (6, 12):
                v = (hidden[layer] * mask).sum(1) / mask.sum(1)
                v = torch.nn.functional.normalize(v, dim=1)
                out[layer][idx] = v.numpy()
    return {f"mp{k}": v for k, v in out.items()}


def main(out: str) -> None:
    import torch

    torch.set_num_threads(2)
    t0 = time.time()
    model = load_model()
    assert model.tuned is not None and model.escalation is not None and model.everyday is not None
    assert model.everyday.tuned is not None
    rows = load_faceacts(EVERYDAY)
    utts = utterances_in_context(rows)
    arrays: dict[str, np.ndarray] = {"classes": np.array([str(c) for c in model.classes])}
    order, in_order = predict_in_turn_order(model, rows, utts, range(len(rows)))
    final = np.zeros_like(in_order)
    final[order] = in_order
    arrays["final"] = final
    print(f"final {time.time() - t0:.0f} s", flush=True)
    x, u_vecs, ctx_vecs = model.features(utts)
    logits = np.asarray(x @ model.coef.T) + model.intercept
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    arrays["lin"] = model._aligned_rows(model.linear_classes, p / p.sum(axis=1, keepdims=True))
    arrays["head"] = model.everyday.proba(utts, u_vecs, ctx_vecs, model.classes)
    arrays["gate"] = model.everyday.gate.logits(u_vecs)
    arrays["u"], arrays["ctx"] = u_vecs, context_vectors(model.encoder, utts)
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utts]
    model.prepare()
    for name, half in (("tuned", model.tuned), ("ev_tuned", model.everyday.tuned), ("esc", model.escalation)):
        arrays[name] = model._aligned(half, half.predict_proba(pairs))
        print(f"{name} {time.time() - t0:.0f} s", flush=True)
    prev = [u.context[-1][1] if u.context else "" for u in utts]
    for key, texts in (("u", [u.text for u in utts]), ("prev", prev)):
        for k, v in mpnet_vectors(texts).items():
            arrays[f"{k}_{key}"] = v
        print(f"mpnet {key} {time.time() - t0:.0f} s", flush=True)
    np.savez_compressed(out, **arrays)
    print(f"-> {out} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
