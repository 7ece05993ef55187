"""Sweep turn-model training knobs on one loaded corpus: MentalManip dev AUC/macro-F1, ordinary false alarms."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np

from guardian.detectors.local.corpus import load_corpus
from guardian.detectors.local.train import TrainConfig, calibrate, dev_scores, fit, log


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    s = np.concatenate([pos, neg])
    ranks = s.argsort().argsort() + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def chatbot_check(model: object) -> dict[str, int]:
    """Hand-written replies (lab/data/chatbot_replies.jsonl): flagged counts per label at each sensitivity."""
    from pathlib import Path

    from guardian.corpora.conversations import load_conversations
    from guardian.detectors.local.detector import LocalModelDetector

    out: dict[str, int] = {}
    for c in load_conversations(Path(__file__).parent / "data" / "chatbot_replies.jsonl"):
        for level, kind in (("high", None), ("medium", None), ("medium", "assistant")):
            detector = LocalModelDetector(sensitivity=level, kind=kind)
            detector.model = lambda: model  # type: ignore[method-assign,assignment,return-value]
            a = detector.analyze(c.conversation)
            key = f"{c.label}_{kind or level}"
            out[key] = out.get(key, 0) + int(a.decision and a.manipulator == "Assistant")
    return out


def main() -> None:
    context = "--context" in sys.argv
    corpus = load_corpus(context=context)
    log("corpus loaded")
    for spec in (a for a in sys.argv[1:] if a != "--context"):
        config = TrainConfig()
        for item in filter(None, spec.split(",")):
            key, value = item.split("=")
            kind = type(getattr(config, key))
            parsed = value in ("1", "true") if kind is bool else kind(value)
            config = dataclasses.replace(config, **{key: parsed})
        config = dataclasses.replace(config, context=context)
        model, history = fit(corpus.data, corpus.train, corpus.dev, config=config)
        s = dev_scores(model, corpus)
        kinds = np.array(s.kind)
        mm = kinds == "mentalmanip"
        metrics = calibrate(model, corpus)
        replies = chatbot_check(model)
        best = min(history, key=lambda h: h["dev_loss"])
        print(json.dumps({
            "spec": spec, "best_epoch": best["epoch"],
            "mm_auc": round(auc(s.manip_logit[mm & s.positive], s.manip_logit[mm & ~s.positive]), 4),
            "high": metrics["dev_flagged_high"], "medium": metrics["dev_flagged_medium"],
            "chatbot": replies,
            "tech": metrics["dev_technique_micro_f1"], "vuln": metrics["dev_vulnerability_micro_f1"],
        }), flush=True)


if __name__ == "__main__":
    main()
