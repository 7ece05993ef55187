"""Training of the reply head: is this turn a manipulative reply to a user? Never imported on the per-turn path.

Why a head apart from the network: the network learns manipulation from MentalManip's movie
lines by multiple-instance learning, beside conversations in which every turn is harmless; as a
reply to a user's request it ranked a polite password reminder above gaslighting (dev AUC .79 on
the chatbot exchanges even when they joined its training). A logistic regression over the
reply's own MiniLM vector separates them (.95 on dev). Trained on the train part of the chatbot
exchanges (the manipulative reply positive; the benign replies, the users' turns and earlier
harmless replies negative) and on turns of ordinary conversations (task, everyday, phone calls),
so it learns "manipulates its user", not "sounds unlike a task dialogue". Platt-scaled on the dev
part's chatbot exchanges and task dialogues (a conversation's score is its highest turn), folded
into the stored weights.
"""

from __future__ import annotations

import numpy as np

from guardian.detectors.local.calibration import platt
from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import Bag
from guardian.detectors.local.model import TurnModel
from guardian.encoding.sentence_encoder import DIM

#: Most turns each ordinary kind gives the reply head as negatives (a sample of the train part; all
#: the task dialogues' turns, since the chatbot point is held to them).
REPLY_NEGATIVES = {"sgd": 1_000_000, "dailydialog": 4000, "calls": 2000}
#: Total weight of the benign chatbot turns and of the ordinary turns, the manipulative replies' being 1.
#: Against class-balanced weights (every negative alike): dev chatbot replies flagged at the task
#: dialogues' 98th percentile 25 / 32 with 1 / 39 benign, against 30 / 32 with 19 / 39
#: (lab/turn_reply_weights.py; docs/history.md "Turn model").
CHATBOT_NEGATIVE_WEIGHT = 2.0
ORDINARY_WEIGHT = 1.0


def _rows(corpus_bags: list[Bag], *, seed: int) -> tuple[list[int], list[int], list[int]]:
    """(manipulative replies, other chatbot turns, ordinary turns): rows for the reply head from bags of one part."""
    rng = np.random.default_rng(seed)
    positive: list[int] = []
    negative: list[int] = []
    sampled: list[int] = []
    ordinary: dict[str, list[int]] = {}
    for b in corpus_bags:
        if b.source == "chatbot":
            (positive if b.manipulative == 1.0 else negative).extend(b.rows.tolist())
        elif b.source in REPLY_NEGATIVES and b.negative_turns:
            ordinary.setdefault(b.source, []).extend(b.rows.tolist())
    for source, rows in sorted(ordinary.items()):
        take = min(len(rows), REPLY_NEGATIVES[source])
        sampled.extend(int(r) for r in rng.choice(np.array(rows), take, replace=False))
    return positive, negative, sampled


def fit_reply_head(model: TurnModel, corpus: Corpus, *, c: float, seed: int) -> dict[str, object]:
    """Fit the reply head into `model` (weights already calibrated); what was fitted, for the manifest.

    Leaves `model` without one when the corpus has no chatbot exchanges (a custom corpus)."""
    from sklearn.linear_model import LogisticRegression

    positive, negative, ordinary = _rows(corpus.train, seed=seed)
    if not positive or not negative:
        return {}
    x = corpus.data.features[positive + negative + ordinary, :DIM]
    y = np.array([1] * len(positive) + [0] * (len(negative) + len(ordinary)))
    weight = np.concatenate([np.full(len(positive), 1 / len(positive)),
                             np.full(len(negative), CHATBOT_NEGATIVE_WEIGHT / len(negative)),
                             np.full(len(ordinary), ORDINARY_WEIGHT / max(len(ordinary), 1))])
    fitted = LogisticRegression(C=c, max_iter=5000).fit(x, y, sample_weight=weight / weight.mean())
    w = fitted.coef_[0].astype(np.float32)
    b = float(fitted.intercept_[0])
    # Calibration on the dev part, conversation by conversation (its highest turn), as the network's, over
    # the threads the chatbot point serves: the chatbot exchanges and the task dialogues.
    groups: dict[tuple[str, str], list[np.ndarray]] = {}
    labels: dict[tuple[str, str], bool] = {}
    for bag in corpus.dev:
        if bag.source in ("chatbot", "sgd"):
            key = (bag.source, bag.conversation_id)
            groups.setdefault(key, []).append(bag.rows)
            labels[key] = labels.get(key, False) or (bag.source == "chatbot" and bag.manipulative == 1.0)
    keys = sorted(groups)
    scores = np.array([float((corpus.data.features[np.concatenate(groups[k]), :DIM] @ w).max()) + b for k in keys])
    a, shift = platt(scores, np.array([labels[k] for k in keys], dtype=int))
    model.reply_w = (a * w).astype(np.float32)
    model.reply_b = np.array([a * b + shift], dtype=np.float32)
    return {"c": c, "positives": len(positive), "chatbot_negatives": len(negative), "ordinary_negatives": len(ordinary),
            "platt": [a, shift],
            "dev_conversations": len(keys)}
