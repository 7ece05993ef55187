"""Training of the fine-tuned reply head (`reply_pair`): never imported on the per-turn path.

Rows, from the train part only: every turn of the chatbot exchanges read as (turn, turn before) —
a manipulative thread's last reply positive, its earlier turns and every turn of a benign thread
negative — and `ordinary` turns sampled from the ordinary conversations (task dialogues, everyday
dialogues, calls without a scam), negative, so the head learns "manipulates its user" and not
"sounds unlike a task dialogue". Each group's total weight is as the linear reply head's: the
manipulative replies 1, the benign chatbot turns 2, the ordinary turns 1 (`reply.py`). MiniLM's six
layers and a two-class head are fine-tuned (`encoding.finetune.train_pairs`); the result is stored
with int8 layers, reloaded, and Platt-scaled on the dev part's chatbot exchanges and task dialogues
as the int8 runtime scores them (a conversation's score: its highest turn).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from guardian.detectors.local.augment import spoken
from guardian.detectors.local.calibration import HAND_WRITTEN, platt, turn_logits
from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import Bag, by_conversation, conversation_pairs
from guardian.detectors.local.reply import CHATBOT_NEGATIVE_WEIGHT, ORDINARY_WEIGHT
from guardian.detectors.local.reply_pair import (
    CLASSES,
    NO_REQUEST,
    REPLY_PAIR_FILE,
    ReplyPairHead,
    ReplyPairs,
)
from guardian.encoding.pair_classifier import TuneConfig

#: Ordinary conversations whose turns are the head's plain negatives (scam calls are not: their turns
#: are the network's business).
ORDINARY_SOURCES = ("sgd", "dailydialog", "calls")
#: The recipe measured in lab/turn_reply_finetune.py (3 epochs; 5-7 minutes on two cores).
PAIR_CONFIG = TuneConfig(epochs=3, lr=5e-5, head_lr=1e-3, max_len=128, batch_size=32)


def training_rows(
    corpus: Corpus, *, ordinary: int, seed: int, spoken_share: float = 0.0,
    hard: int = 0, hardness: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray]:
    """(pairs, labels, row weights with mean 1, groups) from the train part; groups: 0 a manipulative
    reply, 1 another chatbot turn, 2 an ordinary turn. `spoken_share` of the rows get a copy as a
    transcript of speech writes it (`augment.spoken`), same label, same group (whose total weight
    stays as it is). `hard`: that many more ordinary turns, the ones `hardness` (feature rows -> score)
    ranks highest among those not drawn at random: the sharp everyday remarks a uniform draw of a pool
    that is mostly task dialogue rarely holds, and that a 40-turn call gives many chances to fire."""
    texts = corpus.data.texts
    pairs: list[tuple[str, str]] = []
    labels: list[int] = []
    group: list[int] = []
    pool: list[tuple[str, str]] = []
    pool_rows: list[int] = []
    for (source, _), bags in sorted(by_conversation(corpus.train).items()):
        rows = np.concatenate([b.rows for b in bags])
        read = dict(zip(rows.tolist(), conversation_pairs(texts, rows), strict=True))
        if source in HAND_WRITTEN:
            for b in bags:
                positive = b.manipulative == 1.0
                for r in b.rows.tolist():
                    pairs.append(read[r])
                    labels.append(int(positive))
                    group.append(0 if positive else 1)
        elif source in ORDINARY_SOURCES and all(b.label != "scam" for b in bags):
            keys = sorted(read)
            pool_rows.extend(keys)
            pool.extend(read[r] for r in keys)
    take = np.random.default_rng(seed).permutation(len(pool))[:ordinary]
    if hard > 0 and hardness is not None and len(take) < len(pool):
        rest = np.setdiff1d(np.arange(len(pool)), take)
        score = np.asarray(hardness(corpus.data.features[np.array(pool_rows)[rest]]))
        take = np.concatenate([take, rest[np.argsort(-score, kind="stable")[:hard]]])
    pairs += [pool[int(i)] for i in take]
    labels += [0] * len(take)
    group += [2] * len(take)
    if spoken_share > 0:
        rng = np.random.default_rng(seed + 1)
        chosen = [k for k in range(len(pairs)) if rng.random() < spoken_share]
        for k in chosen:
            turn, before = pairs[k]
            pairs.append((spoken(turn, rng), before if before == NO_REQUEST else spoken(before, rng)))
            labels.append(labels[k])
            group.append(group[k])
    g = np.array(group)
    weight = np.zeros(len(g))
    for k, total in ((0, 1.0), (1, CHATBOT_NEGATIVE_WEIGHT), (2, ORDINARY_WEIGHT)):
        weight[g == k] = total / max(int((g == k).sum()), 1)
    return pairs, np.array(labels, dtype=int), weight / weight.mean() if len(weight) else weight, g


def conversation_maxima(head: ReplyPairHead, corpus: Corpus, bags: Sequence[Bag],
                        keep: Callable[[str], bool] = lambda _: True) -> dict[tuple[str, str], float]:
    """Each conversation's highest reply-head logit (uncalibrated), for the conversations whose source `keep`s."""
    logits = turn_logits(head, corpus, bags, keep)
    return {key: max(logits[r] for b in group for r in b.rows.tolist())
            for key, group in by_conversation(bags).items() if keep(key[0])}


def fit_reply_pair(
    corpus: Corpus, *, config: TuneConfig = PAIR_CONFIG, ordinary: int = 3000, spoken_share: float = 0.0,
    hard: int = 0, hardness: Callable[[np.ndarray], np.ndarray] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[ReplyPairHead | None, dict[str, object]]:
    """The fine-tuned, calibrated reply head (None without chatbot exchanges), and what was fitted."""
    from guardian.encoding.finetune import train_pairs

    pairs, y, weight, groups = training_rows(corpus, ordinary=ordinary, seed=config.seed, spoken_share=spoken_share,
                                             hard=hard, hardness=hardness)
    if not y.any() or y.all():
        return None, {}
    trained: ReplyPairs = train_pairs(pairs, y, classes=list(CLASSES), config=config, factory=ReplyPairs,
                                      row_weight=weight, progress=progress)
    with tempfile.TemporaryDirectory(prefix="guardian-reply-pair-") as tmp:
        # Stored with int8 layers: calibrate what a saved artifact will run, not the float16 copy.
        trained.save(Path(tmp), file=REPLY_PAIR_FILE, int8=True)
        classifier = ReplyPairs.load(Path(tmp), file=REPLY_PAIR_FILE)
    head = ReplyPairHead(classifier=classifier)
    scores = conversation_maxima(head, corpus, corpus.dev, keep=lambda s: s in ("chatbot", "sgd"))
    keys = sorted(scores)
    x = np.array([scores[k] for k in keys]).reshape(-1, 1)
    positive = {(b.source, b.conversation_id) for b in corpus.dev if b.source == "chatbot" and b.manipulative == 1.0}
    y_dev = np.array([k in positive for k in keys], dtype=int)
    a, shift = platt(x[:, 0], y_dev)
    head.platt = (a, shift)
    head.dialogue_platt = dialogue_scale(head, corpus)
    return head, {"positives": int((groups == 0).sum()), "chatbot_negatives": int((groups == 1).sum()),
                  "ordinary_negatives": int((groups == 2).sum()), "spoken_share": spoken_share, "hard_negatives": hard,
                  "config": {k: getattr(config, k) for k in ("epochs", "lr", "head_lr", "max_len", "batch_size", "seed")},
                  "platt": [a, shift], "dialogue_platt": head.dialogue_platt, "dev_conversations": len(keys)}


#: The dev conversations whose turns set the dialogue scale: the turn-labelled dialogues (their labelled
#: turns positive, every other turn negative) and everyday and task dialogues (every turn negative).
DIALOGUE_SCALE_SOURCES = ("dialogue", "dailydialog", "sgd")


def dialogue_scale(head: ReplyPairHead, corpus: Corpus) -> tuple[float, float] | None:
    """The Platt scale of a turn outside chatbot threads, fitted turn by turn on the dev part (None without
    turn-labelled dev dialogues: the head then stays in chatbot threads)."""
    logits = turn_logits(head, corpus, corpus.dev, keep=lambda s: s in DIALOGUE_SCALE_SOURCES)
    positive = {int(r) for b in corpus.dev if b.source == "dialogue" and b.manipulative == 1.0 for r in b.rows}
    if not positive:
        return None
    rows = sorted(logits)
    a, b = platt(np.array([logits[r] for r in rows]), np.array([int(r in positive) for r in rows]))
    return a, b

