"""Issue 19: is a manipulative chatbot reply stopped before its words reach the user when it streams?

Streaming under `policy="block"` screens a reply at each sentence end before releasing it
(`agents/_holdback.py`). For every manipulative reply of the held-out chatbot exchanges (and of
the hand-written evaluation file), each prefix that ends a sentence is screened in its thread as
the middleware would (`LocalModelDetector(kind="assistant")`, the assistant named); prints how many
replies are blocked at some prefix and how many already at their first sentence (nothing released).
Usage: python lab/turn_reply_prefixes.py --artifact DIR [--part test]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from guardian.conversation import Conversation
from guardian.corpora.conversations import load_conversations, split_of
from guardian.detectors.local.corpus import load_chatbot_exchanges, training_encoder
from guardian.detectors.local.detector import LocalModelDetector

SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+")  # as the hold-back gate cuts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--part", default="test")
    args = parser.parse_args()
    detector = LocalModelDetector(artifact_dir=args.artifact, kind="assistant", sensitivity="medium",
                                  encoder=training_encoder())
    sets = {
        f"exchanges_{args.part}": [c for c in load_chatbot_exchanges() if split_of(c.id) == args.part],
        "hand_written": load_conversations(Path(__file__).parent / "data" / "chatbot_replies.jsonl"),
    }
    out = {}
    for name, convs in sets.items():
        manipulative = [c for c in convs if c.label == "manipulative"]
        blocked = first = 0
        for c in manipulative:
            turns = c.conversation.turns
            reply = turns[-1].text
            prefixes = [reply[: m.end()].strip() for m in SENTENCE_END.finditer(reply)] + [reply]
            windows = [Conversation.from_pairs([(t.speaker, t.text) for t in turns[:-1]] + [(turns[-1].speaker, p)])
                       for p in prefixes]
            flags = [a.decision and a.manipulator == turns[-1].speaker for a in detector.analyze_batch(windows)]
            blocked += any(flags)
            first += flags[0]
        out[name] = {"manipulative": len(manipulative), "blocked_at_some_prefix": blocked,
                     "blocked_at_first_sentence": first}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
