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
    """Dev part of the chatbot exchanges (data/chatbot/exchanges.jsonl; never the evaluation file
    lab/data/chatbot_replies.jsonl): replies blocked as the middleware would (flagged, the assistant
    named), per label, at `high`, `medium` and the chatbot point."""
    from guardian.corpora.conversations import split_of
    from guardian.detectors.local.corpus import load_chatbot_exchanges
    from guardian.detectors.local.detector import LocalModelDetector

    dev = [c for c in load_chatbot_exchanges() if split_of(c.id) == "dev"]
    out: dict[str, int] = {}
    for level, kind in (("high", None), ("medium", None), ("medium", "assistant")):
        detector = LocalModelDetector(sensitivity=level, kind=kind)
        detector.model = lambda: model  # type: ignore[method-assign,assignment,return-value]
        for c, a in zip(dev, detector.analyze_batch([c.conversation for c in dev]), strict=True):
            key = f"{c.label}_{kind or level}"
            out[key] = out.get(key, 0) + int(a.decision and a.manipulator == "Assistant")
    out.update({f"n_{label}": sum(c.label == label for c in dev) for label in ("manipulative", "benign")})
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
        bot = np.char.startswith(kinds.astype(str), "chatbot")
        best = min(history, key=lambda h: h["dev_loss"])
        print(json.dumps({
            "spec": spec, "best_epoch": best["epoch"],
            "mm_auc": round(auc(s.manip_logit[mm & s.positive], s.manip_logit[mm & ~s.positive]), 4),
            "high": metrics["dev_flagged_high"], "medium": metrics["dev_flagged_medium"],
            "chatbot": replies,
            "chatbot_auc": round(auc(s.manip_logit[bot & s.positive], s.manip_logit[bot & ~s.positive]), 4),
            "thresholds": metrics["thresholds"], "assistant": metrics.get("dev_flagged_assistant"),
            "tech": metrics["dev_technique_micro_f1"], "vuln": metrics["dev_vulnerability_micro_f1"],
        }), flush=True)


if __name__ == "__main__":
    main()
