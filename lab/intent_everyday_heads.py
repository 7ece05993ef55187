"""Stage 2 of the everyday face-act experiment (issue 25): fit the gate and candidate heads, score blends.

Reads the arrays of `lab/intent_everyday_features.py`; fits the domain gate and each candidate
everyday head on the everyday train part (+ the persuasion corpus), scores each blend with the
shipped halves on the everyday dev part (the live order: each conversation's turns in order, one
escalation budget and one running persuasion-likeness per conversation), and prints the table
the choice in docs/intent.md was made from. The test part is scored only with --test (once, for
the chosen blend).
Usage: python lab/intent_everyday_heads.py FEATS.npz [--test]
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain import ConversationDomain
from guardian.detectors.intent.domain_train import Vectors, fit_gate, fit_head, precision_threshold
from guardian.detectors.intent.model import ESCALATE_BELOW, EscalationBudget
from guardian.detectors.intent.train import metrics
from guardian.taxonomy import FaceAct

EVERYDAY = "data/faceacts/everyday.csv"


def order_by_turn(rows, idx):  # type: ignore[no-untyped-def]
    return sorted(idx, key=lambda i: (rows[i].conversation_id, rows[i].turn))


def blend(rows, idx, z, lin, head, tuned, esc, *, tw_old=0.5, tw_head=0.5, gate_on=True):  # type: ignore[no-untyped-def]
    """Final probabilities of rows `idx` as the live model computes them (see IntentModel._mixer)."""
    out = np.zeros((len(rows), lin.shape[1]), np.float32)
    domains: dict[str, ConversationDomain] = defaultdict(ConversationDomain)
    budgets: dict[str, EscalationBudget] = defaultdict(EscalationBudget)
    gs = np.zeros(len(rows))
    for i in order_by_turn(rows, idx):
        cid = rows[i].conversation_id
        g = domains[cid].observe(z[i]) if gate_on else 1.0
        gs[i] = g

        def mix(t, i=i, g=g):  # type: ignore[no-untyped-def]
            return g * ((1 - tw_old) * lin[i] + tw_old * t) + (1 - g) * ((1 - tw_head) * head[i] + tw_head * t)

        p = mix(tuned[i])
        if budgets[cid].admit(bool(p.max() < ESCALATE_BELOW)):
            p = mix(esc[i])
        out[i] = p
    return out, gs


def score(rows, idx, p, classes, label):  # type: ignore[no-untyped-def]
    gold = [rows[i].face_act for i in idx]
    pred = [classes[int(j)] for j in p[idx].argmax(1)]
    m = metrics(gold, pred)
    print(f"{label:44} n={m['n']} acc={m['accuracy']:.3f} macroF1={m['macro_f1']:.3f}", flush=True)
    return m


def head_proba(head, utts_rows, vec, classes):  # type: ignore[no-untyped-def]
    from guardian.detectors.intent.domain import DomainGate, EverydayHead
    from guardian.detectors.intent.model import FeatureConfig
    from guardian.detectors.intent.train import utterances_in_context

    h = EverydayHead(classes=head.classes, coef=head.coef, intercept=head.intercept, word=head.word, side=head.side,
                     config=FeatureConfig(), gate=DomainGate(np.zeros(384, np.float32), 0.0), tuned_weight=0.5,
                     abstain_below=0.0)
    return h.proba(utterances_in_context(utts_rows), vec.utterance, vec.context, classes)


def main(path: str, test: bool) -> None:
    f = np.load(path)
    classes = [FaceAct(c) for c in f["classes"]]
    ev = load_faceacts(EVERYDAY)
    pe = load_faceacts(faceacts_path())
    parts = {p: [i for i, r in enumerate(ev) if split_of(r.conversation_id) == p] for p in ("train", "dev", "test")}
    print({k: len(v) for k, v in parts.items()})
    tr = [ev[i] for i in parts["train"]]
    ev_vec = Vectors(f["ev_u"], f["ev_ctx"])
    tr_vec = Vectors(f["ev_u"][parts["train"]], f["ev_ctx"][parts["train"]])
    pe_vec = Vectors(f["pe_u"], f["pe_ctx"])
    gate = fit_gate(f["pe_u"], np.vstack([f["gate_neg"], tr_vec.utterance]))
    z_ev = gate.logits(f["ev_u"])
    z_pe = gate.logits(f["pe_u"])
    pe_idx = list(range(len(pe)))
    _, g_pe = blend(pe, pe_idx, z_pe, f["pe_lin"], f["pe_lin"], f["pe_tuned"], f["pe_esc"])
    _, g_ev = blend(ev, list(range(len(ev))), z_ev, f["ev_lin"], f["ev_lin"], f["ev_tuned"], f["ev_esc"])
    print(f"gate: persuasion turns g>=.5 {np.mean(g_pe >= .5):.4f}, g>=.9 {np.mean(g_pe >= .9):.4f}, "
          f"mean {g_pe.mean():.3f}; everyday dev/test turns g<.5 "
          f"{np.mean(g_ev[parts['dev'] + parts['test']] < .5):.4f}, mean {g_ev[parts['dev'] + parts['test']].mean():.3f}")
    old, _ = blend(ev, list(range(len(ev))), z_ev, f["ev_lin"], f["ev_lin"], f["ev_tuned"], f["ev_esc"], gate_on=False)
    evaluate = "test" if test else "dev"
    score(ev, parts[evaluate], old, classes, "shipped model")
    candidates = [
        {"augment": True, "everyday_weight": 4.0, "c": 1.0},
        {"augment": True, "everyday_weight": 8.0, "c": 1.0},
        {"augment": False, "everyday_weight": 4.0, "c": 1.0},
        {"augment": True, "everyday_weight": 4.0, "c": 0.3},
    ]
    if test:
        candidates = [eval(sys.argv[3])]
    results = []
    for cand in candidates:
        t0 = time.time()
        head = fit_head(pe, tr, persuasion_vectors=pe_vec, everyday_vectors=tr_vec, **cand)
        hp = head_proba(head, ev, ev_vec, classes)
        print(f"-- head {cand} fitted in {time.time() - t0:.0f} s", flush=True)
        tws = [float(sys.argv[4])] if test else [0.0, 0.25, 0.5]
        for tw in tws:
            p, _ = blend(ev, list(range(len(ev))), z_ev, f["ev_lin"], hp, f["ev_tuned"], f["ev_esc"], tw_head=tw)
            m = score(ev, parts[evaluate], p, classes, f"  tuned share {tw}")
            dev = parts["dev"]
            conf = p[dev].max(1)
            correct = np.array([classes[int(j)] == ev[i].face_act for i, j in zip(dev, p[dev].argmax(1), strict=True)])
            thr, prec, cov = precision_threshold(conf, correct, target=0.85)
            print(f"    dev threshold {thr:.3f}: precision {prec:.3f}, coverage {cov:.3f}")
            if test:
                idx = parts["test"]
                shown = p[idx].max(1) >= thr
                correct = np.array([classes[int(j)] == ev[i].face_act for i, j in zip(idx, p[idx].argmax(1), strict=True)])
                print(f"    test with that threshold: precision {correct[shown].mean():.3f}, coverage {shown.mean():.3f}")
            results.append((m["macro_f1"] + m["accuracy"], cand, tw, thr))
    print("best:", max(results, key=lambda r: r[0]))


if __name__ == "__main__":
    main(sys.argv[1], "--test" in sys.argv)
