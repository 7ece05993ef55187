"""Round 3 of the everyday face-act experiment (issue 25): the frozen mpnet-6 vectors as they run.

Encodes every everyday utterance and the turn before it with `FrozenEncoder` (int8 in onnxruntime,
one sentence at a time: what the live detector computes), saves them beside stage 1's float32
vectors for the CV script (`mp6q_u`, `mp6q_prev`), and prints the CPU time per sentence and how
close the int8 vectors are to the float32 ones.
Usage: python lab/intent_everyday_r3_frozen.py FEATS.npz OUT.npz
"""

from __future__ import annotations

import sys
import time

import numpy as np

from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.frozen import FrozenEncoder
from guardian.detectors.intent.train import utterances_in_context


def main(feats: str, out: str) -> None:
    f = np.load(feats)
    utts = utterances_in_context(load_faceacts("data/faceacts/everyday.csv"))
    enc = FrozenEncoder()
    enc.prepare()
    texts = [u.text for u in utts]
    cpu, wall = [], []
    vec = np.zeros((len(texts), 768), np.float32)
    for k, t in enumerate(texts):
        c0, w0 = time.thread_time(), time.perf_counter()
        vec[k] = enc.encode([t])[0]
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    prev = enc.encode([u.context[-1][1] if u.context else "" for u in utts])
    cos = np.sum(vec * f["mp6_u"], axis=1)
    print(f"per sentence: CPU p50 {1000 * np.median(cpu):.2f} ms, p90 {1000 * np.quantile(cpu, .9):.2f}; "
          f"wall p50 {1000 * np.median(wall):.2f} ms; cosine to float32 p50 {np.median(cos):.4f} min {cos.min():.4f}")
    np.savez_compressed(out, mp6q_u=vec, mp6q_prev=prev)
    print(f"-> {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
