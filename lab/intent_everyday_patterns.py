"""Pressure patterns on whole everyday conversations (issue 25, docs/intent.md "Everyday conversations").

Runs the intent detector turn by turn, as a live session does, over the full source conversation
of every dev/test conversation of the everyday set (never a train one: the head learnt from
those) and prints each pattern with its quotes and the intents of the turns it quotes.
Usage: python lab/intent_everyday_patterns.py [MAX_CONVERSATIONS]
"""

from __future__ import annotations

import json
import sys

from guardian.conversation import Conversation
from guardian.corpora.conversations import conversations_dir, split_of
from guardian.corpora.datasets import load_faceacts, load_mentalmanip
from guardian.detectors.intent.detector import IntentDetector
from guardian.locations import bundled_data_dir


def full_conversations(ids: set[str]) -> dict[str, Conversation]:
    out: dict[str, Conversation] = {}
    for name in ("dailydialog", "sgd", "calls"):
        with (conversations_dir() / f"{name}.jsonl").open(encoding="utf-8") as f:
            for line in f:
                conv = json.loads(line)
                if conv["id"] in ids:
                    out[conv["id"]] = Conversation.from_pairs([(t["speaker"], t["text"]) for t in conv["turns"]],
                                                              id=conv["id"])
    for d in load_mentalmanip():
        if f"mm-{d.id}" in ids:
            out[f"mm-{d.id}"] = Conversation.from_pairs([(t.speaker, t.text) for t in d.conversation.turns],
                                                        id=f"mm-{d.id}")
    return out


def main(limit: int) -> None:
    rows = load_faceacts(bundled_data_dir() / "faceacts" / "everyday.csv")
    ids = sorted({r.conversation_id for r in rows if split_of(r.conversation_id) != "train"})[:limit]
    detector = IntentDetector()
    found = 0
    for cid, conv in sorted(full_conversations(set(ids)).items()):
        intents = {}
        for t in conv.turns:
            a = detector.analyze(conv.upto(t.index))
            intents.update({i.turn: i for i in a.intents})
            for f in a.findings:
                found += 1
                print(f"\n[{cid}] turn {t.index}: {f.label} {f.score:.2f}")
                for e in f.evidence:
                    i = intents.get(e.turn)
                    act = f"{i.face_act.value} {i.score:.2f}" if i is not None else "?"
                    print(f"   turn {e.turn} ({act}): \"{e.quote}\"")
    print(f"\n{found} pattern findings in {len(ids)} conversations")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
