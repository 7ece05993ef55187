"""Round 4 of the everyday face-act experiment (issue 25): frozen mpnet cut to fewer layers, as it runs.

Encodes every everyday utterance and the turn before it with `FrozenEncoder(layers=N)` (int8 in
onnxruntime, one sentence at a time, as the live detector would), for the CV script
(`lab/intent_everyday_r3_cv.py ... --frozen OUT.npz`, design name `mp6q` reads `mp6q_u`/`mp6q_prev`,
so the arrays are saved under those names), and prints the CPU time per sentence.
Usage: python lab/intent_everyday_r4_layers.py LAYERS OUT.npz
"""

from __future__ import annotations

import sys
import time

import numpy as np

from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.frozen import FrozenEncoder
from guardian.detectors.intent.train import utterances_in_context


def main(layers: int, out: str) -> None:
    utts = utterances_in_context(load_faceacts("data/faceacts/everyday.csv"))
    enc = FrozenEncoder(layers=layers)
    enc.prepare()
    texts = [u.text for u in utts]
    cpu = []
    vec = np.zeros((len(texts), 768), np.float32)
    for k, t in enumerate(texts):
        c0 = time.thread_time()
        vec[k] = enc.encode([t])[0]
        cpu.append(time.thread_time() - c0)
    prev = enc.encode([u.context[-1][1] if u.context else "" for u in utts])
    print(f"mpnet-{layers} int8 per sentence: CPU p50 {1000 * np.median(cpu):.2f} ms, p90 "
          f"{1000 * np.quantile(cpu, .9):.2f} ms")
    np.savez_compressed(out, mp6q_u=vec, mp6q_prev=prev)
    print(f"-> {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
