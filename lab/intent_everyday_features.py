"""Stage 1 of the everyday face-act experiment (issue 25): everything the heads are fitted from.

For the everyday set and the persuasion corpus: MiniLM vectors of each utterance and of its
context (what the linear half reads), and the shipped model's halves' probabilities (its linear
half, the fine-tuned MiniLM and the mpnet-6 escalation half, each for every utterance, so any
blending policy can be scored without running them again). For the domain gate: MiniLM vectors of
utterances from the train part of the conversation corpora (never a dev/test conversation).
Usage: python lab/intent_everyday_features.py OUT.npz
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain_train import gate_texts  # the shipped gate's negatives
from guardian.detectors.intent.model import context_vectors, load_model
from guardian.detectors.intent.train import utterances_in_context
from guardian.detectors.intent.tuned import pair_text

ROOT = Path(__file__).resolve().parents[1]


def halves(model, rows):  # type: ignore[no-untyped-def]
    utts = utterances_in_context(rows)
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utts]
    t0 = time.time()
    lin, u_vecs = model.predict_proba(utts, tuned=False)
    print(f"  linear {time.time() - t0:.0f} s", flush=True)
    assert model.tuned is not None and model.escalation is not None
    model.prepare()
    tuned = model._aligned(model.tuned, model.tuned.predict_proba(pairs))
    print(f"  tuned {time.time() - t0:.0f} s", flush=True)
    esc = model._aligned(model.escalation, model.escalation.predict_proba(pairs))
    print(f"  escalation {time.time() - t0:.0f} s", flush=True)
    return {"lin": lin, "tuned": tuned, "esc": esc, "u": u_vecs, "ctx": context_vectors(model.encoder, utts)}


def main(out: str) -> None:
    model = load_model()
    arrays: dict[str, np.ndarray] = {"classes": np.array([str(c) for c in model.classes])}
    for name, path in (("ev", ROOT / "data" / "faceacts" / "everyday.csv"), ("pe", faceacts_path())):
        print(name, flush=True)
        for k, v in halves(model, load_faceacts(path)).items():
            arrays[f"{name}_{k}"] = v
    texts = gate_texts()
    arrays["gate_neg"] = model.encoder.encode(texts)
    np.savez_compressed(out, **arrays)
    print(f"-> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
