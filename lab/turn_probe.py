"""What the turn labels teach a frozen encoder: a linear probe on (turns before, turn), by register.

The first measurement for the one-model issue (49): before fine-tuning anything, does supervision
that names the turn already separate manipulation from ordinary talk of every register, where the
shipped patchwork does not? MiniLM (frozen, as shipped) embeds the turn and, separately, the two turns
before it, each marked as the same speaker or the other one; a logistic regression reads
[turn, context, turn * context]. Trained on the train parts of the turn-labelled files
(`data/dialogues/*.jsonl`, `data/chatbot/exchanges.jsonl`), the C and the two operating points chosen
on the dev parts, scored once on the test parts:

- `medium`: the highest-recall threshold that flags at most 3 % of dev-part ordinary conversations
  of every register at some turn (so no register is loud);
- `high`: the threshold with the best dev-part MentalManip dialogue macro-F1 (a dialogue is flagged
  when any of its turns is).

MentalManip's test part is read from the CSVs (dialogue labels only; its turns were never labelled).

    python lab/turn_probe.py OUT.json [--cache /tmp/turn_probe.npz]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from guardian.conversation import Turn
from guardian.corpora.conversations import LabelledConversation, load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.corpora.turn_labels import labelled_turns
from guardian.encoding.sentence_encoder import SentenceEncoder

DATA = Path(__file__).resolve().parents[1] / "data"
FILES = ("dialogues/mentalmanip.jsonl", "dialogues/registers.jsonl", "dialogues/turns.jsonl",
         "chatbot/exchanges.jsonl")
CONTEXT = 2


def context_text(before: Sequence[Turn], speaker: str) -> str:
    """The turns before, each marked as the speaker's own or the other side's (who says it matters)."""
    return "\n".join(f"{'me' if t.speaker == speaker else 'them'}: {t.text}" for t in before) or "(start)"


def mentalmanip_test() -> list[LabelledConversation]:
    """The test part of the MentalManip CSVs as conversations (dialogue labels only)."""
    con = {d.id: d for d in load_mentalmanip(mentalmanip_path("con"))}
    maj = {d.id: d for d in load_mentalmanip(mentalmanip_path("maj"))}
    out = []
    for i, d in {**maj, **con}.items():
        if split_of(i) == "test":
            out.append(LabelledConversation(i, "mentalmanip", "manipulative" if d.manipulative else "benign",
                                            d.conversation, register="film"))
    return out


def rows(conversations: Sequence[LabelledConversation]) -> list[dict[str, Any]]:
    out = []
    by_id = {c.id: c for c in conversations}
    for lt in labelled_turns(conversations, context=CONTEXT):
        c = by_id[lt.conversation_id]
        out.append({"id": c.id, "register": c.register or c.kind, "label": c.label, "turn": lt.turn.index,
                    "text": lt.turn.text, "context": context_text(lt.context, lt.turn.speaker),
                    "y": int(lt.manipulative), "part": split_of(c.id)})
    return out


def all_turns(conversations: Sequence[LabelledConversation]) -> list[dict[str, Any]]:
    """Every turn of conversations without turn labels (MentalManip's test part)."""
    out = []
    for c in conversations:
        turns = c.conversation.turns
        for i, t in enumerate(turns):
            out.append({"id": c.id, "register": "film", "label": c.label, "turn": i, "text": t.text,
                        "context": context_text(turns[max(0, i - CONTEXT):i], t.speaker), "y": -1,
                        "part": "test"})
    return out


def features(encoder: SentenceEncoder, data: list[dict[str, Any]]) -> np.ndarray:
    u = encoder.encode([r["text"] for r in data])
    v = encoder.encode([r["context"] for r in data])
    return np.hstack([u, v, u * v])


def by_conversation(data: list[dict[str, Any]], p: np.ndarray) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r, s in zip(data, p, strict=True):
        c = out.setdefault(r["id"], {"register": r["register"], "label": r["label"], "p": [], "y": []})
        c["p"].append(float(s))
        c["y"].append(r["y"])
    return out


def figures(convs: dict[str, dict[str, Any]], threshold: float) -> dict[str, Any]:
    """Per register and label: conversations flagged at some turn; turn recall and precision where labelled."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in convs.values():
        groups[c["register"]].append(c)
    out: dict[str, Any] = {}
    for register, cs in sorted(groups.items()):
        entry: dict[str, Any] = {}
        for label in sorted({c["label"] for c in cs}):
            sub = [c for c in cs if c["label"] == label]
            entry[label] = {"n": len(sub), "flagged_any": round(np.mean([max(c["p"]) >= threshold for c in sub]), 4)}
        marked = [(p >= threshold, y) for c in cs for p, y in zip(c["p"], c["y"], strict=True) if y >= 0]
        if any(y for _, y in marked):
            tp = sum(f and y for f, y in marked)
            entry["turn_recall"] = round(tp / max(1, sum(y for _, y in marked)), 4)
            entry["turn_precision"] = round(tp / max(1, sum(f for f, _ in marked)), 4)
        out[register] = entry
    return out


def dialogue_scores(convs: dict[str, dict[str, Any]], threshold: float) -> dict[str, float]:
    y = np.array([c["label"] == "manipulative" for c in convs.values()])
    f = np.array([max(c["p"]) >= threshold for c in convs.values()])
    acc = float(np.mean(y == f))
    f1s = []
    for pos in (True, False):
        tp = np.sum((f == pos) & (y == pos))
        prec, rec = tp / max(1, np.sum(f == pos)), tp / max(1, np.sum(y == pos))
        f1s.append(0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec))
    return {"accuracy": round(acc, 4), "macro_f1": round(float(np.mean(f1s)), 4),
            "flagged_manipulative": round(float(np.mean(f[y])), 4), "flagged_benign": round(float(np.mean(f[~y])), 4),
            "n": len(y)}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--cache", default="/tmp/turn_probe_vectors.npz")
    args = ap.parse_args(argv)
    conversations = [c for f in FILES for c in load_conversations(DATA / f)]
    data = rows(conversations)
    test_mm = all_turns(mentalmanip_test())
    encoder = SentenceEncoder(cache_size=1_000_000, batch_size=64)
    cache = Path(args.cache)
    if cache.is_file():
        encoder.preload(cache)
    x = features(encoder, data)
    x_mm = features(encoder, test_mm)
    encoder.persist(cache)
    part = np.array([r["part"] for r in data])
    y = np.array([r["y"] for r in data])
    tr, dev, te = part == "train", part == "dev", part == "test"
    best: tuple[float, float, LogisticRegression] | None = None
    for c in (0.1, 0.3, 1.0, 3.0):
        model = LogisticRegression(C=c, max_iter=3000, class_weight="balanced").fit(x[tr], y[tr])
        p = model.predict_proba(x[dev])[:, 1]
        from sklearn.metrics import average_precision_score

        ap_dev = float(average_precision_score(y[dev], p))
        print(f"C={c}: dev turn average precision {ap_dev:.4f}")
        if best is None or ap_dev > best[0]:
            best = (ap_dev, c, model)
    assert best is not None
    _, c_best, model = best
    p_all = model.predict_proba(x)[:, 1]
    p_mm = model.predict_proba(x_mm)[:, 1]
    dev_rows = [r for r, d in zip(data, dev, strict=True) if d]
    dev_convs = by_conversation(dev_rows, p_all[dev])
    grid = np.linspace(0.05, 0.995, 190)

    def loudest(t: float) -> float:
        ordinary = defaultdict(list)
        for cv in dev_convs.values():
            if cv["label"] == "benign" and cv["register"] != "film":
                ordinary[cv["register"]].append(max(cv["p"]) >= t)
        return max(float(np.mean(v)) for v in ordinary.values() if len(v) >= 5)

    medium = float(min((t for t in grid if loudest(t) <= 0.03), default=grid[-1]))
    film_dev = {k: v for k, v in dev_convs.items() if v["register"] == "film"}
    high = float(max(grid, key=lambda t: dialogue_scores(film_dev, t)["macro_f1"]))
    test_rows = [r for r, d in zip(data, te, strict=True) if d]
    test_convs = by_conversation(test_rows, p_all[te])
    mm_convs = by_conversation(test_mm, p_mm)
    report = {
        "C": c_best,
        "train_turns": int(tr.sum()), "dev_turns": int(dev.sum()), "test_turns": int(te.sum()),
        "thresholds": {"medium": round(medium, 4), "high": round(high, 4)},
        "dev": {"loudest_ordinary_register_at_medium": round(loudest(medium), 4),
                "mentalmanip_at_high": dialogue_scores(film_dev, high),
                "mentalmanip_at_medium": dialogue_scores(film_dev, medium)},
        "test": {point: {"mentalmanip_test_part": dialogue_scores(mm_convs, t), "registers": figures(test_convs, t)}
                 for point, t in (("medium", medium), ("high", high))},
    }
    Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report["thresholds"]), json.dumps(report["dev"]))
    for point in ("medium", "high"):
        print(point, json.dumps(report["test"][point]["mentalmanip_test_part"]))


if __name__ == "__main__":
    main()
