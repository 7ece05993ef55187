"""Experiment (docs/intent.md, "Pattern examples"): the pressure patterns on the face-act corpus.

Every conversation's intents come from the shipped pipeline's out-of-fold predictions
(`intent_train.cross_validate` with the fine-tuned and escalation halves and the escalation budget,
fold models reused from the cache as
`guardian eval faceacts --cv` does): the model that labels a conversation never trained on it.
The same rules also run on the gold face acts (score 1.0), to show what the model misses;
"predicted_and_gold" counts predicted firings that the gold acts also give (same pattern, same turn).
Prints one JSON object: firings per pattern (predicted / gold) and the best-scored example
examples of each pattern with their quotes.

    .venv/bin/python lab/intent_patterns_oof.py            # ~3 min with cached fold models
    .venv/bin/python lab/intent_patterns_oof.py --proba oof.npy   # probabilities saved before
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

import guardian  # noqa: F401  (offline environment defaults)
from guardian.conversation import Conversation
from guardian.corpora.datasets import FaceActUtterance, load_faceacts
from guardian.detectors.intent.patterns import derive_patterns
from guardian.detectors.intent.train import ESCALATION, cross_validate
from guardian.detectors.intent.tuned import TuneConfig
from guardian.findings import Finding, Intent
from guardian.taxonomy import FaceAct


def conversations(rows: list[FaceActUtterance]) -> dict[str, list[int]]:
    """Row indices of each conversation, in turn order."""
    by_conv: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_conv[r.conversation_id].append(i)
    return {c: sorted(idx, key=lambda i: rows[i].turn) for c, idx in by_conv.items()}


def findings(
    rows: list[FaceActUtterance], idx: list[int], acts: list[FaceAct], scores: list[float]
) -> list[Finding]:
    conv = Conversation.from_pairs(((rows[i].speaker, rows[i].utterance) for i in idx), id=rows[idx[0]].conversation_id)
    intents = [
        Intent(turn=k, speaker=rows[i].speaker, face_act=a, score=s, intention=a.general_intention, detector="intent")
        for k, (i, a, s) in enumerate(zip(idx, acts, scores, strict=True))
    ]
    return derive_patterns(conv, intents)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proba", type=Path, help="out-of-fold probabilities (rows in load_faceacts() order, "
                    "columns in FaceAct order of the acts present); computed and saved here when missing")
    ap.add_argument("--examples", type=int, default=3, help="best-scored examples shown per pattern")
    args = ap.parse_args()

    rows = load_faceacts()
    classes = [a for a in FaceAct if any(r.face_act == a for r in rows)]
    if args.proba is not None and args.proba.is_file():
        proba = np.load(args.proba)
    else:
        oof = cross_validate(rows, tune=TuneConfig(), escalate=ESCALATION, reuse=True)
        assert [str(c) for c in oof.classes] == [str(c) for c in classes]
        proba = oof.probabilities
        if args.proba is not None:
            np.save(args.proba, proba)
    counts: dict[str, Counter[str]] = {"predicted": Counter(), "gold": Counter(), "predicted_and_gold": Counter()}
    found: dict[str, list[tuple[str, Finding]]] = defaultdict(list)
    by_conv = conversations(rows)
    for conv_id, idx in by_conv.items():
        top = [int(j) for j in proba[idx].argmax(1)]
        predicted = findings(rows, idx, [classes[j] for j in top], [float(proba[i, j]) for i, j in zip(idx, top, strict=True)])
        gold = findings(rows, idx, [rows[i].face_act for i in idx], [1.0] * len(idx))
        for f in predicted:
            kind = str(f.pattern)
            counts["predicted"][kind] += 1
            found[kind].append((conv_id, f))
        gold_at = {(str(f.pattern), f.evidence[-1].turn) for f in gold}
        for f in gold:
            counts["gold"][str(f.pattern)] += 1
        for f in predicted:
            if (str(f.pattern), f.evidence[-1].turn) in gold_at:
                counts["predicted_and_gold"][str(f.pattern)] += 1
    out = {
        "conversations": len(by_conv),
        "firings": {k: dict(sorted(v.items())) for k, v in counts.items()},
        "examples": {
            kind: [
                {"conversation": conv_id, "score": round(f.score, 2),
                 "quotes": [{"turn": e.turn, "speaker": rows[by_conv[conv_id][e.turn]].speaker, "quote": e.quote}
                            for e in f.evidence]}
                for conv_id, f in sorted(hits, key=lambda h: -h[1].score)[: args.examples]
            ]
            for kind, hits in sorted(found.items())
        },
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
