"""Stage 4 of the everyday face-act experiment (issue 25): the blend the shipped model runs, scored.

Simulates `IntentModel.predict_proba` with an everyday head and the everyday tuned half, turn by
turn per conversation (domain state, routing, escalation budget), from the arrays of stages 1 and
3, for a few gate strengths and tuned shares; chooses on the dev part; `--test` scores the choice
given as `GATE_C TUNED_SHARE` on the test part (once).
Usage: python lab/intent_everyday_blend.py FEATS.npz EV_PROBS.npz [--test GATE_C TUNED_SHARE]
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain import ConversationDomain
from guardian.detectors.intent.domain_train import Vectors, fit_gate, fit_head, precision_threshold
from guardian.detectors.intent.model import ESCALATE_BELOW, EscalationBudget
from guardian.detectors.intent.train import metrics
from guardian.taxonomy import FaceAct

CLASSES = list(FaceAct)


def aligned(p: np.ndarray, classes: list[FaceAct]) -> np.ndarray:
    out = np.zeros((len(p), len(CLASSES)), np.float32)
    for j, c in enumerate(classes):
        out[:, CLASSES.index(c)] = p[:, j]
    return out


def simulate(rows, z, lin, head, tuned, esc, tuned2, w):  # type: ignore[no-untyped-def]
    out = np.zeros((len(rows), len(CLASSES)), np.float32)
    domains: dict[str, ConversationDomain] = defaultdict(ConversationDomain)
    budgets: dict[str, EscalationBudget] = defaultdict(EscalationBudget)
    routed_any = np.zeros(len(rows), bool)
    for i in sorted(range(len(rows)), key=lambda i: (rows[i].conversation_id, rows[i].turn)):
        d = domains[rows[i].conversation_id]
        routed = tuned2 is not None and d.everyday_so_far()
        routed_any[i] = routed
        g = d.observe(float(z[i]))
        t = tuned2[i] if routed else tuned[i]
        mix = lambda t, i=i, g=g: g * (0.5 * lin[i] + 0.5 * t) + (1 - g) * ((1 - w) * head[i] + w * t)  # noqa: E731
        p = mix(t)
        if not routed and budgets[rows[i].conversation_id].admit(bool(p.max() < ESCALATE_BELOW)):
            p = mix(esc[i])
        out[i] = p
    return out, routed_any


def report(rows, idx, p, label):  # type: ignore[no-untyped-def]
    gold = [rows[i].face_act for i in idx]
    pred = [CLASSES[int(j)] for j in p[idx].argmax(1)]
    m = metrics(gold, pred)
    conf = p[idx].max(1)
    correct = np.array([a == b for a, b in zip(gold, pred, strict=True)])
    print(f"{label:36} n={m['n']} acc={m['accuracy']:.3f} macroF1={m['macro_f1']:.3f}", flush=True)
    return m, conf, correct


def main() -> None:
    f = np.load(sys.argv[1])
    t2 = np.load(sys.argv[2])
    test = "--test" in sys.argv
    pcls = [FaceAct(c) for c in f["classes"]]
    ev, pe = load_faceacts("data/faceacts/everyday.csv"), load_faceacts(faceacts_path())
    parts = {p: [i for i, r in enumerate(ev) if split_of(r.conversation_id) == p] for p in ("train", "dev", "test")}
    tr = [ev[i] for i in parts["train"]]
    ev_t = {k: aligned(f[f"ev_{k}"], pcls) for k in ("lin", "tuned", "esc")}
    pe_t = {k: aligned(f[f"pe_{k}"], pcls) for k in ("lin", "tuned", "esc")}
    tuned2 = aligned(t2["probs"], [FaceAct(c) for c in t2["classes"]])
    head = fit_head(pe, tr, persuasion_vectors=Vectors(f["pe_u"], f["pe_ctx"]),
                    everyday_vectors=Vectors(f["ev_u"][parts["train"]], f["ev_ctx"][parts["train"]]))
    from guardian.detectors.intent.domain import DomainGate, EverydayHead
    from guardian.detectors.intent.model import FeatureConfig
    from guardian.detectors.intent.train import utterances_in_context

    h = EverydayHead(classes=head.classes, coef=head.coef, intercept=head.intercept, word=head.word, side=head.side,
                     config=FeatureConfig(), gate=DomainGate(np.zeros(384, np.float32), 0.0), tuned_weight=0,
                     abstain_below=0)
    hp = aligned(h.proba(utterances_in_context(ev), f["ev_u"], f["ev_ctx"], head.classes), head.classes)
    report(ev, parts["dev"], hp, "head alone (dev)")
    report(ev, parts["dev"], tuned2, "everyday tuned half alone (dev)")
    grid = [(float(sys.argv[sys.argv.index("--test") + 1]), float(sys.argv[sys.argv.index("--test") + 2]))] if test \
        else [(c, w) for c in (0.5, 4.0) for w in (0.5, 0.7, 0.85, 1.0)]
    best = None
    for c, w in grid:
        gate = fit_gate(f["pe_u"], np.vstack([f["gate_neg"], f["ev_u"][parts["train"]]]), c=c)
        _, pe_routed = simulate(pe, gate.logits(f["pe_u"]), pe_t["lin"], pe_t["lin"], pe_t["tuned"], pe_t["esc"],
                                pe_t["tuned"], 0.5)
        p, _ = simulate(ev, gate.logits(f["ev_u"]), ev_t["lin"], hp, ev_t["tuned"], ev_t["esc"], tuned2, w)
        print(f"gate C={c}: persuasion turns read by the everyday tuned half {pe_routed.mean():.4f}")
        m, conf, correct = report(ev, parts["dev"], p, f"  tuned share {w} (dev)")
        thr, prec, cov = precision_threshold(conf, correct, target=0.85)
        print(f"    dev threshold {thr:.3f}: shown precision {prec:.3f}, shown share {cov:.3f}")
        score = m["accuracy"] + m["macro_f1"]
        if best is None or score > best[0]:
            best = (score, c, w, thr)
        if test:
            mt, conf, correct = report(ev, parts["test"], p, f"  TEST tuned share {w}")
            shown = conf >= thr
            print(f"    test shown precision {correct[shown].mean():.3f}, shown share {shown.mean():.3f}")
            print(mt)
    print("best on dev (score, gate C, tuned share, threshold):", best)


if __name__ == "__main__":
    main()
