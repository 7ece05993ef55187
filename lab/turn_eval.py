"""Held-out figures of a turn-model artifact: replays the test part turn by turn through the detector.

Every conversation of the test part (never read in training) is replayed as `guardian watch`
would: after each turn the detector sees the last `--window` turns. Prints JSON: per kind of
conversation the share flagged at some turn, per sensitivity; MentalManip's dialogue-level
metrics (final turn, whole dialogue as the window), FPR by length and ever-flagged FPR; who is
named at the first flagged turn of scam calls; chatbot replies blocked (the hand-written
evaluation file, and the test part of the chatbot exchanges).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.detectors.local.corpus import (
    load_chatbot_exchanges,
    load_dialogue_turns,
    training_encoder,
)
from guardian.detectors.local.detector import LocalModelDetector


def prefixes(c: Conversation, window: int) -> list[Conversation]:
    return [c.model_copy(update={"turns": c.turns[max(0, i + 1 - window) : i + 1]}) for i in range(len(c.turns))]


def bucket(n: int) -> str:
    return "1" if n == 1 else "2-4" if n <= 4 else "5-8" if n <= 8 else "9+"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--part", default="test")
    parser.add_argument("--chatbot-only", action="store_true",
                        help="only the chatbot replies and exchanges (minutes instead of the whole replay)")
    args = parser.parse_args()
    encoder = training_encoder()
    detector = LocalModelDetector(artifact_dir=args.artifact, encoder=encoder, threshold=0.0)
    model = detector.model()
    by_level = {level: LocalModelDetector(artifact_dir=args.artifact, encoder=encoder, sensitivity=level)
                for level in ("low", "medium", "high")}
    if "assistant" in model.thresholds:  # the chatbot operating point (what the middleware uses)
        by_level["assistant"] = LocalModelDetector(artifact_dir=args.artifact, encoder=encoder, kind="assistant")
    out: dict[str, object] = {"part": args.part, "thresholds": model.thresholds, "window": args.window}

    def replay(c: Conversation) -> dict[str, list[tuple[float, str | None]]]:
        """Per sensitivity, per prefix: the detector's probability, and who it names when it flags (else None)."""
        windows = prefixes(c, args.window)
        return {level: [(a.probability or 0.0, a.manipulator if a.decision else None)
                        for a in d.analyze_batch(windows)] for level, d in by_level.items()}

    if not args.chatbot_only:
        kinds: dict[str, dict[str, object]] = {}
        # The ordinary conversations and calls, the turn-labelled dialogues (their part), and two evaluation
        # sets of LLM-written dialogues (every one, never trained on): gaslighting, and the dialogues' round 2.
        sets = [(f.stem, [c for c in load_conversations(f) if split_of(c.id) == args.part])
                for f in sorted(conversations_dir().glob("*.jsonl"))]
        sets.append(("dialogues", [c for c in load_dialogue_turns() if split_of(c.id) == args.part]))
        sets.append(("gaslighting_eval", load_conversations(Path(__file__).parent / "data" / "gaslighting_dialogues.jsonl")))
        sets.append(("dialogues_round2_eval", load_conversations(Path(__file__).parent / "data" / "dialogues_round2.jsonl")))
        for stem, rows in sets:
            by_label = defaultdict(list)
            for c in rows:
                by_label[c.label].append(c)
            for label, convs in sorted(by_label.items()):
                tops, flags, named = [], defaultdict(list), defaultdict(list)
                for c in convs:
                    r = replay(c.conversation)
                    tops.append([p for p, _ in r["medium"]])
                    for level in by_level:
                        flags[level].append([who is not None for _, who in r[level]])
                        first = next((who for _, who in r[level] if who is not None), None)
                        if first is not None and c.suspect is not None:
                            named[level].append(first == c.suspect)
                entry: dict[str, object] = {"n": len(convs), "turns_p50": statistics.median(len(t) for t in tops)}
                for level in by_level:
                    entry[f"flagged_any_{level}"] = round(float(np.mean([any(f) for f in flags[level]])), 4)
                    entry[f"turns_flagged_{level}"] = round(float(np.mean([x for f in flags[level] for x in f])), 4)
                    if named[level]:  # who is named at the first flag: the scammer, the manipulator
                        who = "scammer" if label == "scam" else "suspect"
                        entry[f"{who}_named_{level}"] = round(float(np.mean(named[level])), 4)
                entry["top_probability_p50"] = round(float(np.median([max(t) for t in tops])), 4)
                entry["top_probability_p90"] = round(float(np.quantile([max(t) for t in tops], 0.9)), 4)
                kinds[f"{stem}:{label}"] = entry
        out["conversations"] = kinds

        dialogues = [d for d in load_mentalmanip(mentalmanip_path("con")) if split_of(d.id) == args.part]
        final = detector.score_windows([d.conversation for d in dialogues])
        y = np.array([d.manipulative for d in dialogues])
        replays = [replay(d.conversation) for d in dialogues]
        mm: dict[str, object] = {"n": len(dialogues), "manipulative_share": round(float(y.mean()), 4)}
        for level in by_level:
            pred = np.array([a.decision for a in by_level[level].analyze_batch([d.conversation for d in dialogues])])
            ever = np.array([any(who is not None for _, who in r[level]) for r in replays])
            f1s = []
            for cls in (True, False):
                tp = float(((y == cls) & (pred == cls)).sum())
                f1s.append(2 * tp / max(float((y == cls).sum() + (pred == cls).sum()), 1.0))
            lengths = np.array([bucket(len(d.conversation.turns)) for d in dialogues])
            mm[level] = {
                "accuracy": round(float((pred == y).mean()), 4),
                "macro_f1": round(float(np.mean(f1s)), 4),
                "fpr": round(float(pred[~y].mean()), 4),
                "recall": round(float(pred[y].mean()), 4),
                "ever_flagged_fpr": round(float(ever[~y].mean()), 4),
                "fpr_by_turns": {b: round(float(pred[~y & (lengths == b)].mean()), 4)
                                 for b in ("1", "2-4", "5-8", "9+") if (~y & (lengths == b)).any()},
            }
        # Techniques / vulnerabilities of the manipulative dialogues that carry labels: the top turn's.
        tt, tp_, vt, vp = [], [], [], []
        from guardian.detectors.local.model import TECHNIQUES, VULNERABILITIES

        for d, s in zip(dialogues, final, strict=True):
            top = int(np.argmax(s.scores.logits))
            t = s.scores.techniques[top]
            v = s.scores.vulnerabilities[top]
            if d.manipulative and d.techniques:
                tt.append([x in d.techniques for x in TECHNIQUES])
                tp_.append(t >= model.technique_ratio * t.max())
            if d.manipulative and d.vulnerabilities:
                vt.append([x in d.vulnerabilities for x in VULNERABILITIES])
                vp.append(v >= model.vulnerability_ratio * v.max())

        def micro(a: list, b: list) -> float:
            a_, b_ = np.array(a, bool), np.array(b, bool)
            tp = (a_ & b_).sum()
            return round(float(2 * tp / max(a_.sum() + b_.sum(), 1)), 4)

        mm["technique_micro_f1"] = micro(tt, tp_)
        mm["vulnerability_micro_f1"] = micro(vt, vp)
        out["mentalmanip_con"] = mm
    # Hand-written user -> assistant exchanges (lab/data/chatbot_replies.jsonl: 10 plainly manipulative
    # replies, 10 benign), the reply screened as the middleware would (flagged and the assistant named).
    replies = load_conversations(Path(__file__).parent / "data" / "chatbot_replies.jsonl")
    chatbot: dict[str, dict[str, int]] = {}
    for level, d in by_level.items():
        for c, a in zip(replies, d.analyze_batch([c.conversation for c in replies]), strict=True):
            cell = chatbot.setdefault(level, {"manipulative": 0, "benign": 0})
            cell[c.label] += int(a.decision and a.manipulator == "Assistant")
    out["chatbot_replies_flagged_of_10"] = chatbot
    # The held-out part of the chatbot exchanges the model trained on (data/chatbot/exchanges.jsonl,
    # split by id like every corpus): blocked as the middleware would, per label.
    exchanges = [c for c in load_chatbot_exchanges() if split_of(c.id) == args.part]
    # Also by writing round (the id's prefix: "asst" the first writer, "asst2" four others): a part
    # written by other hands says whether the head learned the kind or one writer's style.
    held: dict[str, dict[str, int]] = {}
    rounds: dict[str, dict[str, dict[str, int]]] = {}
    for level, d in by_level.items():
        for c, a in zip(exchanges, d.analyze_batch([c.conversation for c in exchanges]), strict=True):
            for cell in (held.setdefault(level, {}), rounds.setdefault(c.id.split("-")[0], {}).setdefault(level, {})):
                cell[f"n_{c.label}"] = cell.get(f"n_{c.label}", 0) + 1
                cell[c.label] = cell.get(c.label, 0) + int(a.decision and a.manipulator == "Assistant")
    out["chatbot_exchanges"] = held
    out["chatbot_exchanges_by_round"] = rounds
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
