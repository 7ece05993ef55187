"""How the reply head's negatives are weighted (the numbers behind `detectors/local/reply.py`'s choice).

Fits logistic regressions over the turn's MiniLM vector on the train part (the chatbot exchanges'
manipulative replies against their other turns and turns of ordinary conversations) and prints,
on the dev part, how many chatbot threads reach the task dialogues' 98th / 99.5th / 100th
percentile (a conversation's score is its highest turn), per weighting. Dev only; the held-out
test part and lab/data/chatbot_replies.jsonl are never read.
"""

from __future__ import annotations

import json

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from guardian.detectors.local.corpus import load_corpus
from guardian.encoding.sentence_encoder import DIM

TAKE = {"sgd": 1_000_000, "dailydialog": 4000, "calls": 2000}


def main() -> None:
    corpus = load_corpus(hints=False)
    x_all = corpus.data.features[:, :DIM]
    rng = np.random.default_rng(17)
    pools: dict[str, list[int]] = {}
    for b in corpus.train:
        if b.source == "chatbot":
            pools.setdefault("positive" if b.manipulative == 1.0 else "chatbot", []).extend(b.rows.tolist())
        elif b.source in TAKE and b.negative_turns:
            pools.setdefault(b.source, []).extend(b.rows.tolist())
    ordinary = [int(r) for s, n in TAKE.items() for r in rng.choice(pools[s], min(n, len(pools[s])), replace=False)]
    groups: dict[tuple[str, str], list[np.ndarray]] = {}
    labels: dict[tuple[str, str], bool] = {}
    for b in corpus.dev:
        if b.source in ("chatbot", *TAKE):
            key = (b.source, b.conversation_id)
            groups.setdefault(key, []).append(b.rows)
            labels[key] = labels.get(key, False) or (b.source == "chatbot" and b.manipulative == 1.0)
    keys = sorted(groups)
    kind = np.array([k[0] for k in keys])
    y_dev = np.array([labels[k] for k in keys])
    chat = kind == "chatbot"
    positive, chatbot = pools["positive"], pools["chatbot"]
    rows = positive + chatbot + ordinary
    y = np.r_[np.ones(len(positive)), np.zeros(len(chatbot) + len(ordinary))]
    # (name, weights or None for class-balanced, C)
    for q_weight, r_weight, c in ((None, None, 1.0), (1, 1, 1.0), (1, 0.3, 1.0), (2, 1, 1.0), (3, 1, 1.0),
                                  (1, 0.1, 1.0), (2, 1, 10.0), (2, 1, 0.3)):
        if q_weight is None:
            fitted = LogisticRegression(C=c, class_weight="balanced", max_iter=5000).fit(x_all[rows], y)
        else:
            w = np.r_[np.full(len(positive), 1 / len(positive)), np.full(len(chatbot), q_weight / len(chatbot)),
                      np.full(len(ordinary), r_weight / len(ordinary))]
            fitted = LogisticRegression(C=c, max_iter=5000).fit(x_all[rows], y, sample_weight=w / w.mean())
        score = np.array([fitted.decision_function(x_all[np.concatenate(groups[k])]).max() for k in keys])
        out: dict[str, object] = {"chatbot_weight": q_weight or "balanced", "ordinary_weight": r_weight, "C": c,
                                  "dev_auc_chatbot": round(float(roc_auc_score(y_dev[chat], score[chat])), 3)}
        for q in (0.98, 0.995, 1.0):
            t = np.quantile(score[kind == "sgd"], q)
            out[f"at_sgd_{q}"] = {"manipulative": f"{int((score[chat & y_dev] >= t).sum())}/{int((chat & y_dev).sum())}",
                                  "benign": f"{int((score[chat & ~y_dev] >= t).sum())}/{int((chat & ~y_dev).sum())}",
                                  "dailydialog": round(float((score[kind == 'dailydialog'] >= t).mean()), 3)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
