"""Issue 25: do per-act biases on the everyday side's log-probabilities, tuned on dev, lift macro-F1?

Macro-F1 is held down by the rare acts (hneg+, spos+, spos-): a bias per act, added to the bundled
model's log-probabilities and chosen by coordinate ascent on the dev part's macro-F1 + accuracy
(biases in [-1.5, 1.5], three passes), and the one-parameter alternative (logit adjustment: minus
tau x the log of the dev act frequencies), each then read once on the test part. Prints one line per
variant. Measured 2026-11-27 (docs/intent.md, "Per-act biases"): not shipped.
Usage: python lab/intent_everyday_bias.py [FILE]
"""

from __future__ import annotations

import sys

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.model import load_model
from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context


def main(path: str = "data/faceacts/everyday.csv") -> None:
    model = load_model()
    classes = list(model.classes)
    logp, gold = {}, {}
    for part in ("dev", "test"):
        rows = [r for r in load_faceacts(path) if split_of(r.conversation_id) == part]
        order, in_order = predict_in_turn_order(model, rows, utterances_in_context(rows), range(len(rows)))
        probs = np.zeros_like(in_order)
        probs[order] = in_order
        logp[part] = np.log(np.clip(probs, 1e-6, 1))
        gold[part] = np.array([classes.index(r.face_act) for r in rows])

    def score(part: str, bias: np.ndarray) -> tuple[float, float]:
        pred = (logp[part] + bias).argmax(1)
        return (round(float(accuracy_score(gold[part], pred)), 4),
                round(float(f1_score(gold[part], pred, average="macro", labels=sorted(set(gold[part].tolist())),
                                     zero_division=0)), 4))

    bias = np.zeros(len(classes))
    print("bundled", "dev", score("dev", bias), "test", score("test", bias))
    for sweep in range(3):
        for k in range(len(classes)):
            def key(g: float, k: int = k) -> tuple[float, float]:
                trial = bias.copy()
                trial[k] = g
                a, f = score("dev", trial)
                return a + f, -abs(g)

            bias[k] = max(np.linspace(-1.5, 1.5, 31), key=key)
        print(f"per-act biases, pass {sweep + 1}", np.round(bias, 2).tolist(), "dev", score("dev", bias),
              "test", score("test", bias))
    prior = np.bincount(gold["dev"], minlength=len(classes)) / len(gold["dev"])
    for tau in (0.25, 0.5, 0.75, 1.0):
        print(f"logit adjustment tau {tau}", "dev", score("dev", -tau * np.log(np.clip(prior, 1e-3, 1))),
              "test", score("test", -tau * np.log(np.clip(prior, 1e-3, 1))))


if __name__ == "__main__":
    main(*sys.argv[1:2])
