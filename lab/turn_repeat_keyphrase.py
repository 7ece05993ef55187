"""Issue 19: should a MentalManip key phrase count as the repetition rule's second signal?

`examples/gaslighting.txt` turn 1 ("I never said that. You're overreacting, as usual.") scores .61 at
medium (threshold .90, repeat .30) and matches a key phrase, yet is flagged only with Daniel's second
turn. This reads the per-turn scores of `lab/turn_dialogue_scores.py` and compares, per set, part and
label, the share flagged at some turn by the shipped rule and by the rule plus "a turn at or over the
repeat threshold that matches a key phrase" (`augment.key_phrase_hint`, the paper's matching rule).
Usage: python lab/turn_repeat_keyphrase.py SCORES.jsonl --artifact DIR
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import conversations_dir, load_conversations
from guardian.detectors.local.augment import key_phrase_hint
from guardian.detectors.local.corpus import load_dialogue_turns
from guardian.detectors.local.model import platt_probability
from guardian.detectors.local.repetition import repeated_turns
from guardian.detectors.local.reply_pair import dialogue_turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scores", type=Path)
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args()
    manifest = json.loads((args.artifact / "manifest.json").read_text())
    a, b = manifest["reply_pair"]["dialogue_platt"]
    threshold, repeat = manifest["thresholds"]["medium"], manifest["repeat_thresholds"]["medium"]
    texts: dict[str, list[str]] = {}
    conversations = [c for f in conversations_dir().glob("*.jsonl") for c in load_conversations(f)]
    conversations += load_dialogue_turns()
    conversations += load_conversations(Path(__file__).parent / "data" / "gaslighting_dialogues.jsonl")
    for c in conversations:
        texts[c.id] = [t.text for t in c.conversation.turns]
    cells: dict[tuple[str, str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for line in args.scores.open(encoding="utf-8"):
        r = json.loads(line)
        if r["set"] in ("chatbot", "mentalmanip") or r["id"] not in texts:
            continue
        # The turn's score as the detector reads it (`reply_pair.dialogue_turn`).
        p = dialogue_turn(platt_probability(np.array(r["pair:shipped"]), (a, b)), np.array(r["net"]))
        shipped = bool((np.maximum(p, np.array(r["scam"])) >= threshold).any()
                       or repeated_turns(p, r["speakers"], repeat))
        hints = np.array([key_phrase_hint(t) for t in texts[r["id"]]])
        cell = cells[(r["set"], r["part"], r["label"])]
        cell["shipped"].append(shipped)
        cell["with_key_phrase"].append(shipped or bool(((p >= repeat) & hints).any()))
        cell["any_key_phrase"].append(bool(hints.any()))
    for key in sorted(cells):
        print(json.dumps({"set": "/".join(key), "n": len(cells[key]["shipped"]),
                          **{k: round(float(np.mean(v)), 4) for k, v in cells[key].items()}}))


if __name__ == "__main__":
    main()
