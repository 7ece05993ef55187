"""What an everyday side changes on the persuasion corpus (issue 25, rounds 3-4): a bound for its CV figures.

As `lab/intent_everyday_persuasion.py`, for the everyday side of an artifact folder (its gate, head,
everyday tuned half and deep head); the persuasion halves' probabilities come from stage 1 of round
1 (`lab/intent_everyday_features.py`: unchanged halves). The turns the everyday tuned half reads
(and with it the deep head) are where the everyday side weighs most; the share of utterances
whose predicted act differs from the persuasion-only model's bounds the change of the corpus' CV.
A gated deep head (round 4, `DeepHead.gated`) is followed as the detector runs it: the everyday tuned
half counts only for the routed turns the deep head is unsure of and the conversation's budget admits
(the budget counts every turn, routed or not, as the live model does).
Since round 6 the turns a persuasion half reads (routed by the conversation's g before them) keep
its probabilities out of the everyday side where their own g is under .5 (`IntentModel._mixer`'s `routed`);
`--before-round-6` scores the earlier blend.
Usage: python lab/intent_everyday_r3_persuasion.py FEATS.npz ARTIFACT_DIR [--before-round-6]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain import PERSUASION_LIKE, ConversationDomain
from guardian.detectors.intent.model import ESCALATE_BELOW, EscalationBudget, IntentModel
from guardian.detectors.intent.train import utterances_in_context
from guardian.detectors.intent.tuned import pair_text


def main(path: str, artifact: str, *, before: bool = False) -> None:
    f = np.load(path)
    model = IntentModel.load(Path(artifact))
    head = model.everyday
    assert head is not None and head.tuned is not None
    rows = load_faceacts(faceacts_path())
    utts = utterances_in_context(rows)
    classes = model.classes

    def al(p: np.ndarray) -> np.ndarray:
        out = np.zeros((len(p), len(classes)), np.float32)
        for j, c in enumerate(f["classes"]):
            out[:, [str(x) for x in classes].index(str(c))] = p[:, j]
        return out

    lin, tuned, esc = al(f["pe_lin"]), al(f["pe_tuned"]), al(f["pe_esc"])
    hp = head.proba(utts, f["pe_u"], f["pe_ctx"], classes)
    z = head.gate.logits(f["pe_u"])
    order = sorted(range(len(rows)), key=lambda i: (rows[i].conversation_id, rows[i].turn))
    routed = np.zeros(len(rows), bool)
    doms: dict[str, ConversationDomain] = defaultdict(ConversationDomain)
    gs = np.zeros(len(rows))
    for i in order:
        d = doms[rows[i].conversation_id]
        routed[i] = d.everyday_so_far()
        gs[i] = d.observe(float(z[i]))
    idx = np.flatnonzero(routed)
    t2, deep = np.zeros_like(tuned), np.zeros_like(tuned)
    t2[idx] = model._aligned(head.tuned, head.tuned.predict_proba(
        [pair_text(utts[i].text, utts[i].speaker, utts[i].opener, utts[i].context) for i in idx]))
    if head.deep is not None:
        deep[idx] = head.deep_proba([utts[i] for i in idx], classes)
    old, new = np.zeros_like(tuned), np.zeros_like(tuned)
    read_by_half = np.zeros(len(rows), bool)
    b_old: dict[str, EscalationBudget] = defaultdict(EscalationBudget)
    b_new: dict[str, EscalationBudget] = defaultdict(EscalationBudget)
    for i in order:
        cid, g = rows[i].conversation_id, gs[i]
        p = 0.5 * lin[i] + 0.5 * tuned[i]
        old[i] = 0.5 * lin[i] + 0.5 * esc[i] if b_old[cid].admit(bool(p.max() < ESCALATE_BELOW)) else p
        t = t2[i] if routed[i] else tuned[i]
        gated = bool(routed[i] and head.deep is not None and head.deep.gated)
        skip = gated and not (b_new[cid].admit(bool(deep[i].max() < head.deep.tuned_below))  # type: ignore[union-attr]
                              )
        if gated:
            read_by_half[i] = not skip

        def mix(t: np.ndarray, i: int = i, g: float = g, skip: bool = skip) -> np.ndarray:
            if routed[i] and head.deep is not None:
                ts, hs = head.deep.tuned_share, head.deep.head_share
                if skip:  # the gated deep head was sure: its blend without the half
                    ev = ((1 - ts - hs) * deep[i] + hs * hp[i]) / (1 - ts)
                    return g * (0.5 * lin[i] + 0.5 * lin[i]) + (1 - g) * ev
                ev = (1 - ts - hs) * deep[i] + ts * t + hs * hp[i]
            elif routed[i] or before or g >= PERSUASION_LIKE:
                ev = (1 - head.tuned_weight) * hp[i] + head.tuned_weight * t
            else:  # since round 6 a persuasion half's probabilities stay out of an everyday-like turn's everyday side
                ev = hp[i]
            return g * (0.5 * lin[i] + 0.5 * t) + (1 - g) * ev

        q = mix(t)
        if routed[i]:
            if not gated:
                b_new[cid].admit(False)  # counted all the same, as the detector does
            new[i] = q
        else:
            new[i] = mix(esc[i]) if b_new[cid].admit(bool(q.max() < ESCALATE_BELOW)) else q
    gold = np.array([classes.index(r.face_act) for r in rows])
    po, pn = old.argmax(1), new.argmax(1)
    print(f"{len(rows)} utterances; read by the everyday tuned half (and the deep head): {routed.mean():.4f}; "
          f"persuasion-likeness g < .5: {np.mean(gs < .5):.4f}, < .9: {np.mean(gs < .9):.4f}")
    if head.deep is not None and head.deep.gated:
        print(f"gated deep head: the everyday tuned half read for {read_by_half.sum()} of the {routed.sum()} routed turns")
    print(f"predicted act differs from the persuasion-only model's: {np.mean(po != pn):.4f}; of the utterances, "
          f"changed to a wrong act (only these can lower the CV accuracy): {np.mean((po != pn) & (pn != gold)):.4f}")
    print(f"in-sample accuracy (trained on these rows; only the difference means anything): "
          f"persuasion-only {np.mean(po == gold):.4f}, with the everyday side {np.mean(pn == gold):.4f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], before="--before-round-6" in sys.argv)
