"""Issue 19: does the turn model hold up when a conversation is *spoken*, or simply long?

Every conversation we hold is written: LLM-written calls with full punctuation, DailyDialog's tidy
turns, SGD's task chats. Real telephone corpora and many call transcripts read otherwise: lower case,
little punctuation, fillers ("uh", "you know"), repeated words, and the other side's backchannels
("uh-huh", "yeah") as turns of their own; a real call also runs to 40-100+ turns, where a maximum over
turns has many more chances to fire. This replays the test part of each kind four ways, as
`guardian watch` would (window 10, every prefix):

- `clean`: as held;
- `spoken`: the same words re-written in a transcript's register (`spoken`, deterministic per id);
- `long` (ordinary kinds only): five test conversations of the kind joined into one call between the
  same two people, 40-100 turns;
- `spoken_long`: the long ones, each part spoken (what a real phone transcript looks like).

Prints JSON per set and style: the share flagged at some turn per sensitivity, and for manipulative
sets who is named at the first flag. No training data is read; nothing here is tuned on its output.
Usage: python lab/turn_register_stress.py --artifact DIR [--per-kind 120] [--long 40] [--styles clean,spoken,long,spoken_long]
[--out FILE]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.conversations import (
    LabelledConversation,
    conversations_dir,
    load_conversations,
    split_of,
)
from guardian.detectors.local.augment import spoken
from guardian.detectors.local.corpus import load_dialogue_turns, training_encoder
from guardian.detectors.local.detector import LocalModelDetector

BACKCHANNELS = ("uh-huh", "yeah", "mm-hmm", "right", "okay", "yeah yeah", "oh", "huh", "sure")


def spoken_conversation(c: Conversation, *, seed: int) -> Conversation:
    """The conversation in a transcript's register: every turn through `augment.spoken` (lower case, no
    punctuation but apostrophes, fillers, repeated words), and a backchannel turn by the listener after
    about a third of the turns (never after the last, nor where the listener's next turn is an answer)."""
    rng = np.random.default_rng(seed)
    speakers = list(dict.fromkeys(t.speaker for t in c.turns))
    pairs: list[tuple[str, str]] = []
    for k, t in enumerate(c.turns):
        pairs.append((t.speaker, spoken(t.text, rng)))
        if len(speakers) > 1 and k < len(c.turns) - 1 and rng.random() < 1 / 3:
            listener = next(s for s in speakers if s != t.speaker)
            if c.turns[k + 1].speaker != listener:  # the listener's own next turn is already an answer
                pairs.append((listener, BACKCHANNELS[int(rng.integers(len(BACKCHANNELS)))]))
    return Conversation.from_pairs(pairs, id=c.id)


def joined(convs: Sequence[LabelledConversation | Conversation]) -> Conversation:
    """One long call: the conversations in turn, each one's first speaker as `A`, the other as `B`."""
    pairs: list[tuple[str, str]] = []
    for one in convs:
        c = one.conversation if isinstance(one, LabelledConversation) else one
        speakers = list(dict.fromkeys(t.speaker for t in c.turns))
        names = {s: ("A" if i == 0 else "B") for i, s in enumerate(speakers)}
        pairs.extend((names[t.speaker], t.text) for t in c.turns)
    return Conversation.from_pairs(pairs, id="+".join(one.id for one in convs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--per-kind", type=int, default=120, help="conversations per set and label (test part)")
    parser.add_argument("--part", default="test", help="which part of each corpus (dev: for choices)")
    parser.add_argument("--long", type=int, default=40, help="long conversations per ordinary set at most")
    parser.add_argument("--styles", default="clean,spoken,long,spoken_long", help="which replays (comma-separated)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    encoder = training_encoder()
    by_level = {level: LocalModelDetector(artifact_dir=args.artifact, encoder=encoder, sensitivity=level)
                for level in ("low", "medium", "high")}

    def replay(c: Conversation) -> dict[str, str | None]:
        """Per sensitivity: who is named at the first flagged prefix (None: never flagged)."""
        windows = [c.model_copy(update={"turns": c.turns[max(0, i + 1 - args.window): i + 1]})
                   for i in range(len(c.turns))]
        out: dict[str, str | None] = {}
        for level, d in by_level.items():
            out[level] = next((a.manipulator for a in d.analyze_batch(windows) if a.decision), None)
        return out

    sets: list[tuple[str, list[LabelledConversation]]] = [
        (f.stem, [c for c in load_conversations(f) if split_of(c.id) == args.part])
        for f in sorted(conversations_dir().glob("*.jsonl"))
    ]
    sets.append(("dialogues", [c for c in load_dialogue_turns() if split_of(c.id) == args.part]))
    if args.part == "test":  # an evaluation set: never read for a choice
        sets.append(("gaslighting_eval",
                     load_conversations(Path(__file__).parent / "data" / "gaslighting_dialogues.jsonl")))
    report: dict[str, object] = {"window": args.window, "per_kind": args.per_kind}
    for stem, rows in sets:
        for label in sorted({c.label for c in rows}):
            convs = sorted((c for c in rows if c.label == label), key=lambda c: c.id)[: args.per_kind]
            styles: dict[str, list[tuple[Conversation, str | None]]] = {
                "clean": [(c.conversation, c.suspect) for c in convs],
                "spoken": [(spoken_conversation(c.conversation, seed=i), c.suspect) for i, c in enumerate(convs)],
            }
            if label in ("benign", "ordinary", "none", "fair") or stem in ("dailydialog", "sgd"):
                pool = sorted((c for c in rows if c.label == label), key=lambda c: c.id)
                groups = [pool[i: i + 5] for i in range(0, min(len(pool), 5 * args.long), 5) if len(pool[i: i + 5]) == 5]
                styles["long"] = [(joined(g), None) for g in groups]
                # A real call is long *and* spoken: the same groups, each conversation as `spoken` writes it.
                styles["spoken_long"] = [
                    (joined([spoken_conversation(c.conversation, seed=5 * k + j) for j, c in enumerate(g)]), None)
                    for k, g in enumerate(groups)]
            for style, items in styles.items():
                if style not in args.styles.split(","):
                    continue
                named = [replay(c) for c, _ in items]
                entry: dict[str, object] = {
                    "n": len(items),
                    "turns_p50": float(np.median([len(c.turns) for c, _ in items])),
                }
                for level in by_level:
                    entry[f"flagged_any_{level}"] = round(float(np.mean([n[level] is not None for n in named])), 4)
                    right = [n[level] == s for (_, s), n in zip(items, named, strict=True)
                             if s is not None and n[level] is not None]
                    if right:
                        entry[f"suspect_named_{level}"] = round(float(np.mean(right)), 4)
                report[f"{stem}:{label}:{style}"] = entry
                print(f"{stem}:{label}:{style}", json.dumps(entry), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
