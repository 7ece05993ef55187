"""Sweep turn-model training knobs on one loaded corpus: MentalManip dev AUC/macro-F1, ordinary false alarms."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from guardian.detectors.local.calibration import calibrate, dev_scores
from guardian.detectors.local.corpus import load_corpus
from guardian.detectors.local.model import TurnModel
from guardian.detectors.local.reply import fit_reply_head
from guardian.detectors.local.train import TrainConfig, fit, log


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
    """Specs as arguments ("key=value,key=value"); `--context`: the context feature; `--network DIR`:
    keep that artifact's network (no fit; the reply head and calibration are redone per spec)."""
    args = sys.argv[1:]
    context = "--context" in args
    network = Path(args[args.index("--network") + 1]) if "--network" in args else None
    specs = [a for i, a in enumerate(args) if a != "--context" and a != "--network"
             and (i == 0 or args[i - 1] != "--network")]
    corpus = load_corpus(context=context)
    log("corpus loaded")
    for spec in specs:
        config = TrainConfig()
        for item in filter(None, spec.split(",")):
            key, value = item.split("=")
            kind = type(getattr(config, key))
            parsed = value in ("1", "true") if kind is bool else kind(value)
            config = dataclasses.replace(config, **{key: parsed})
        config = dataclasses.replace(config, context=context)
        if network is None:
            model, history = fit(corpus.data, corpus.train, corpus.dev, config=config)
        else:
            model, history = TurnModel.load(network), [{"epoch": 0, "dev_loss": 0.0}]
            model.reply_w = model.reply_b = None
        reply = fit_reply_head(model, corpus, c=config.reply_c, seed=config.seed) if config.reply_c > 0 else {}
        s = dev_scores(model, corpus)
        kinds = np.array(s.kind)
        mm = kinds == "mentalmanip"
        metrics = calibrate(model, corpus)
        replies = chatbot_check(model)
        bot = np.char.startswith(kinds.astype(str), "chatbot")
        reply_scores = s.reply if s.reply is not None else np.zeros(len(kinds))
        best = min(history, key=lambda h: h["dev_loss"])
        print(json.dumps({
            "spec": spec, "best_epoch": best["epoch"],
            "mm_auc": round(auc(s.manip_logit[mm & s.positive], s.manip_logit[mm & ~s.positive]), 4),
            "high": metrics["dev_flagged_high"], "medium": metrics["dev_flagged_medium"],
            "chatbot": replies,
            "chatbot_auc": round(auc(s.manip_logit[bot & s.positive], s.manip_logit[bot & ~s.positive]), 4),
            "chatbot_reply_auc": round(auc(reply_scores[bot & s.positive], reply_scores[bot & ~s.positive]), 4),
            "reply_head": reply,
            "thresholds": metrics["thresholds"], "assistant": metrics.get("dev_flagged_assistant"),
            "tech": metrics["dev_technique_micro_f1"], "vuln": metrics["dev_vulnerability_micro_f1"],
        }), flush=True)


if __name__ == "__main__":
    main()
