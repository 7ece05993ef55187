"""Per-turn scores of a turn-model artifact (and of extra pair heads) on the sets the dialogue rule is chosen on.

Why offline: the shipped network reads each turn without its window (`context` false), and a pair head
reads (turn, turn before), so a turn's scores do not depend on the window a live replay would show; the
flags of any rule over them (`lab/turn_dialogue_rules.py`) are what `guardian eval conversations` would
give, at a fraction of the cost of replaying every prefix per rule.

Writes JSON Lines, one conversation per line: set, part, label, suspect, speakers, the network's
p(manipulative) and p(scam) per turn (`net`, `scam`), and each pair head's raw logit per turn
(`pair:NAME`). Sets: the turn-labelled dialogues (`data/dialogues/turns.jsonl`, dev and test parts), the
LLM-written gaslighting evaluation dialogues (`lab/data/gaslighting_dialogues.jsonl`, never trained on),
the ordinary conversations and scam calls (dev and test), the chatbot exchanges (dev and test) and
MentalManip con (dev and test).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from guardian.conversation import Conversation
from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.detectors.local.corpus import (
    load_chatbot_exchanges,
    load_dialogue_turns,
    training_encoder,
)
from guardian.detectors.local.detector import LocalModelDetector
from guardian.detectors.local.reply_pair import ReplyPairHead, reply_pairs

PARTS = ("dev", "test")


def conversations(limit: int) -> list[dict[str, object]]:
    """Every conversation scored, with what the rules need to know about it."""
    rows: list[dict[str, object]] = []

    def add(name: str, part: str, c: Conversation, label: str, suspect: str | None,
            turns_labelled: tuple[int, ...] | None = None) -> None:
        rows.append({"set": name, "part": part, "id": c.id, "label": label, "suspect": suspect,
                     "manipulative_turns": None if turns_labelled is None else list(turns_labelled),
                     "conversation": c})

    for c in load_dialogue_turns():
        if split_of(c.id) in PARTS:
            add("dialogue", split_of(c.id), c.conversation, c.label, c.suspect, c.manipulative_turns)
    for c in load_conversations(Path("lab/data/gaslighting_dialogues.jsonl")):
        add("gaslighting", "eval", c.conversation, c.label, c.suspect)
    for f in sorted(conversations_dir().glob("*.jsonl")):
        for part in PARTS:
            chosen = [c for c in load_conversations(f) if split_of(c.id) == part][:limit]
            for c in chosen:
                add(f.stem, part, c.conversation, c.label, c.suspect)
    for c in load_chatbot_exchanges():
        if split_of(c.id) in PARTS:
            add("chatbot", split_of(c.id), c.conversation, c.label, None)
    for d in load_mentalmanip(mentalmanip_path("con")):
        if split_of(d.id) in PARTS:
            add("mentalmanip", split_of(d.id), d.conversation, "manipulative" if d.manipulative else "benign", None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--pair", action="append", default=[], metavar="NAME=FILE",
                        help="an extra pair head to score with (a reply_pair.npz); the artifact's own is 'shipped'")
    parser.add_argument("--limit", type=int, default=400, help="conversations per file and part of data/conversations")
    parser.add_argument("--sets", default="", help="comma-separated sets to score (default: all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    detector = LocalModelDetector(artifact_dir=args.artifact, encoder=training_encoder(), threshold=0.0)
    model = detector.model()
    heads = {"shipped": model.reply_pair} if model.reply_pair is not None else {}
    for spec in args.pair:
        name, _, file = spec.partition("=")
        heads[name] = ReplyPairHead(path=Path(file))
    wanted = set(filter(None, args.sets.split(",")))
    rows = [r for r in conversations(args.limit) if not wanted or r["set"] in wanted]
    with args.out.open("w", encoding="utf-8") as out:
        for n, row in enumerate(rows):
            c = row.pop("conversation")
            assert isinstance(c, Conversation)
            scored = detector.score_windows([c], model=model)[0]
            network = model.score(scored.features).manipulation  # the network alone, whatever joins it at run time
            row["speakers"] = [t.speaker for t in c.turns]
            row["net"] = [round(float(v), 5) for v in network]
            scores = scored.scores
            row["scam"] = [round(float(v), 5) for v in scores.scam]
            pairs = reply_pairs(c.turns)
            for name, head in heads.items():
                assert head is not None
                row[f"pair:{name}"] = [round(float(v), 4) for v in head.logits(pairs)]
            out.write(json.dumps(row) + "\n")
            if n % 200 == 0:
                print(f"{n}/{len(rows)}", flush=True)


if __name__ == "__main__":
    main()
