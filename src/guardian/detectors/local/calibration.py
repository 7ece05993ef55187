"""Calibration of the turn model on the development part: Platt scaling, thresholds, label ratios.

Why its own module: `guardian train` and the heads fitted onto an artifact afterwards (the linear and the
fine-tuned reply heads, `lab/turn_reply_refit.py`) calibrate the same way on the same dev part; none of
them imports the network's training loop for it. Never imported on the per-turn path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import (
    TECHNIQUES,
    VULNERABILITIES,
    Bag,
    by_conversation,
    conversation_pairs,
)
from guardian.detectors.local.model import MANIP, SCAM, TurnModel, platt_probability
from guardian.detectors.local.reply_pair import ReplyPairHead, chatbot_reply, dialogue_turn

#: Bag sources that carry labels or hints, not a conversation of their own: left out of the dev scores.
LABEL_ONLY = ("mentalmanip_maj", "mentalmanip_hint", "augment")
#: Conversations written for their hard cases (turn-labelled), not a sample of anyone's talk: left out
#: of the network's Platt scale and of the everyday false-alarm budgets.
HAND_WRITTEN = ("chatbot", "dialogue")


def platt(scores: np.ndarray, labels: np.ndarray, *, weights: np.ndarray | None = None) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a * score + b), a weighted logistic fit."""
    from sklearn.linear_model import LogisticRegression

    if len(set(labels.tolist())) < 2:  # a tiny dev part (tests): leave the logits as they are
        return 1.0, 0.0
    fitted = LogisticRegression(C=1e4).fit(scores.reshape(-1, 1), labels.astype(int), sample_weight=weights)
    return float(fitted.coef_[0, 0]), float(fitted.intercept_[0])


#: Highest share of ordinary conversations of each kind flagged at some turn, per sensitivity.
FALSE_ALARM_BUDGET = {"low": 0.005, "medium": 0.02}
#: Synthetic ordinary phone calls are scripted to sound like scams (callers asking for details):
#: their budget is looser, as in the product's targets.
CALLS_BUDGET = {"low": 0.02, "medium": 0.05}
#: Highest share of the dev part's benign chatbot threads blocked at the chatbot point: the issue's own
#: budget ("benign replies blocked in at most 1 of 10"), applied on dev.
CHATBOT_BENIGN_BUDGET = 0.10


@dataclass(frozen=True, slots=True)
class DevScores:
    """One row per dev conversation: its kind, label, highest calibrated scores, top-turn label scores."""

    kind: list[str]
    positive: np.ndarray
    manip_logit: np.ndarray
    scam_logit: np.ndarray
    tech: np.ndarray  # label probabilities of the top turn
    vuln: np.ndarray
    tech_true: np.ndarray  # nan rows where the dialogue has no labels
    vuln_true: np.ndarray
    #: Highest reply-head probability (zeros without a reply head): with a fine-tuned pair head, its mean
    #: with the linear head's (what chatbot threads read), else the linear head's.
    reply: np.ndarray | None = None
    #: Per conversation, every turn's manipulation logit and (with a pair head that has a dialogue scale)
    #: its dialogue probability: what other conversations read (`reply_pair.dialogue_turn`).
    turn_logits: list[np.ndarray] | None = None
    turn_dialogue: list[np.ndarray] | None = None

    def manipulation(self, platt_ab: tuple[float, float]) -> np.ndarray:
        """Each conversation's highest p(manipulative turn) outside chatbot threads, under the network's
        Platt scale `platt_ab`: the network's alone, or weighted with the pair head's (`dialogue_turn`)."""
        if self.turn_logits is None or self.turn_dialogue is None:
            return platt_probability(self.manip_logit, platt_ab)
        return np.array([float(dialogue_turn(pair, platt_probability(z, platt_ab).astype(np.float32)).max())
                         for z, pair in zip(self.turn_logits, self.turn_dialogue, strict=True)])


def dev_scores(model: TurnModel, corpus: Corpus) -> DevScores:
    z = model.logits(corpus.data.features, corpus.sparse)
    pair: dict[int, float] = {}  # row -> the fine-tuned reply head's probability, when the model has one
    logits: dict[int, float] = {}
    if model.reply_pair is not None:
        logits = turn_logits(model.reply_pair, corpus, corpus.dev, keep=lambda s: s not in LABEL_ONLY)
        pair = dict(zip(logits, model.reply_pair.calibrated(np.array(list(logits.values()))).tolist(), strict=True))
    groups = by_conversation([b for b in corpus.dev if b.source not in LABEL_ONLY])
    kind, positive, manip, scam, tech, vuln, tt, vt, reply = [], [], [], [], [], [], [], [], []
    dialogue_scale = model.reply_pair.dialogue_platt if model.reply_pair is not None else None
    per_turn: list[np.ndarray] = []
    per_turn_dialogue: list[np.ndarray] = []
    for (source, _), bags in groups.items():
        rows = np.concatenate([b.rows for b in bags])
        label = bags[0].label
        kind.append(source if source == "mentalmanip" else f"{source}:{label}")
        positive.append(label in ("manipulative", "scam"))
        top = int(np.argmax(z[rows, MANIP]))
        manip.append(z[rows, MANIP].max())
        per_turn.append(z[rows, MANIP])
        if model.reply_pair is not None and dialogue_scale is not None:
            per_turn_dialogue.append(model.reply_pair.calibrated(np.array([logits[int(r)] for r in rows]),
                                                                 platt=dialogue_scale))
        scam.append(z[rows, SCAM].max())
        labels = model.score(corpus.data.features[rows])  # the conversation as one window, as evaluation does
        if pair:  # what chatbot threads read: the two heads' mean (`reply_pair.chatbot_reply`)
            reply.append(float(chatbot_reply(np.array([pair[int(r)] for r in rows], np.float32), labels.reply).max()))
        else:
            reply.append(0.0 if labels.reply is None else float(labels.reply.max()))
        tech.append(labels.techniques[top])
        vuln.append(labels.vulnerabilities[top])
        with_t = next((b.techniques for b in bags if b.techniques is not None), None)
        with_v = next((b.vulnerabilities for b in bags if b.vulnerabilities is not None), None)
        tt.append(with_t if with_t is not None else np.full(len(TECHNIQUES), np.nan))
        vt.append(with_v if with_v is not None else np.full(len(VULNERABILITIES), np.nan))
    return DevScores(kind, np.array(positive), np.array(manip), np.array(scam), np.array(tech), np.array(vuln),
                     np.array(tt), np.array(vt), np.array(reply), per_turn,
                     per_turn_dialogue if dialogue_scale is not None else None)


def _ratio_decisions(scores: np.ndarray, ratio: float) -> np.ndarray:
    return scores >= ratio * scores.max(axis=1, keepdims=True)


def _micro_f1(truth: np.ndarray, pred: np.ndarray) -> float:
    tp = float((truth * pred).sum())
    fp = float(((1 - truth) * pred).sum())
    fn = float((truth * (1 - pred)).sum())
    return 2 * tp / max(2 * tp + fp + fn, 1.0)


def calibrate(model: TurnModel, corpus: Corpus, *, refit_platt: bool = True) -> dict[str, object]:
    """Fill in the model's calibration, thresholds and label ratios from the dev part; dev metrics.

    `refit_platt=False` keeps the network's Platt scales (a head fitted onto a shipped artifact: the same
    turns re-embedded on another day move the fits in the fourth decimal)."""
    scores = dev_scores(model, corpus)
    kinds = np.array(scores.kind)
    mm = kinds == "mentalmanip"
    # Manipulation head: calibrated where it was trained to answer (MentalManip and the scam calls'
    # scammers); the scam head on the calls.
    # The chatbot exchanges and turn-labelled dialogues are left out: hand-picked hard cases, not a
    # sample of conversations.
    natural = ~np.isin([k.split(":")[0] for k in kinds], HAND_WRITTEN)
    calls = np.char.startswith(kinds.astype(str), "calls")
    if refit_platt:
        model.manip_platt = platt(scores.manip_logit[natural], scores.positive[natural])
        model.scam_platt = platt(scores.scam_logit[calls], scores.positive[calls])
    p_manip = scores.manipulation(model.manip_platt)
    p_scam = platt_probability(scores.scam_logit, model.scam_platt)
    combined = np.maximum(p_manip, p_scam)
    grid = np.unique(np.round(np.concatenate([combined, np.linspace(0.05, 0.99, 95)]), 4))

    def macro_f1(threshold: float, values: np.ndarray = combined) -> float:
        y, p = scores.positive[mm], values[mm] >= threshold
        f = []
        for cls in (True, False):
            tp = float(((y == cls) & (p == cls)).sum())
            f.append(2 * tp / max(float((y == cls).sum() + (p == cls).sum()), 1.0))
        return float(np.mean(f))

    high = max(grid, key=macro_f1)
    thresholds = {"high": float(high)}
    ordinary = sorted({k for k in kinds if k.endswith(":benign") and k.split(":")[0] not in HAND_WRITTEN})
    for level in ("medium", "low"):
        def quiet(threshold: float, level: str = level) -> bool:
            for k in ordinary:
                budget = CALLS_BUDGET[level] if k.startswith("calls") else FALSE_ALARM_BUDGET[level]
                if float((combined[kinds == k] >= threshold).mean()) > budget:
                    return False
            return True

        floor = max(thresholds["high"], thresholds.get("medium", 0.0))
        thresholds[level] = float(min((t for t in grid if t >= floor and quiet(t)), default=0.99))
    # Chatbot threads (the middleware): an assistant has no reason to sound heated, so its operating
    # point is set by the assistant dialogues alone (same budget as medium), not by everyday quarrels.
    # There the reply head joins (`detector._manipulation`); among the thresholds that keep the task
    # dialogues quiet, the lowest that blocks at most `CHATBOT_BENIGN_BUDGET` of the dev benign chatbot
    # threads; when none does, the one that best tells the dev exchanges' manipulative replies from the
    # benign ones (most flagged minus benign flagged; the higher threshold on a tie). The best-separation
    # point alone blocked 84 % of held-out manipulative replies with 22 % of benign ones
    # (lab/turn_reply_finetune.py).
    assistant = [k for k in ordinary if k.startswith("sgd")]
    network = np.maximum(platt_probability(scores.manip_logit, model.manip_platt), p_scam)
    bot = np.maximum(network, scores.reply if scores.reply is not None else 0.0)  # chatbot threads: no dialogue rule
    if assistant:
        quiet_for_tasks = [
            float(t) for t in np.unique(np.concatenate([grid, np.round(bot, 4)]))
            if 0.05 <= t <= thresholds["medium"]
            and all(float((bot[kinds == k] >= t).mean()) <= FALSE_ALARM_BUDGET["medium"] for k in assistant)
        ]
        chat = np.char.startswith(kinds.astype(str), "chatbot")
        if quiet_for_tasks and chat.any() and scores.positive[chat].any() and (~scores.positive[chat]).any():
            def separation(t: float) -> tuple[float, float]:
                flagged = bot[chat] >= t
                y = scores.positive[chat]
                return float(flagged[y].mean() - flagged[~y].mean()), t

            benign = ~scores.positive[chat]
            within = [t for t in quiet_for_tasks if float((bot[chat][benign] >= t).mean()) <= CHATBOT_BENIGN_BUDGET]
            thresholds["assistant"] = min(within) if within else max(quiet_for_tasks, key=separation)
        else:
            thresholds["assistant"] = min(quiet_for_tasks, default=thresholds["medium"])
    model.thresholds = thresholds
    model.scam_threshold = thresholds["medium"]
    metrics: dict[str, object] = {"thresholds": thresholds}
    for level, threshold in thresholds.items():
        flagged = (bot if level == "assistant" else combined) >= threshold
        per_kind = {k: round(float(flagged[kinds == k].mean()), 4) for k in sorted(set(kinds))}
        y, p = scores.positive[mm], flagged[mm]
        per_kind["mentalmanip_accuracy"] = round(float((y == p).mean()), 4)
        per_kind["mentalmanip_macro_f1"] = round(macro_f1(threshold, bot if level == "assistant" else combined), 4)
        per_kind["mentalmanip_fpr"] = round(float(p[~y].mean()), 4)
        metrics[f"dev_flagged_{level}"] = per_kind
    metrics.update(tune_label_ratios(model, scores))
    return metrics


def tune_label_ratios(model: TurnModel, scores: DevScores) -> dict[str, float]:
    """The label ratios with the best micro-F1 on the dev part's labelled MentalManip dialogues (set
    in `model`), and those micro-F1s."""
    mm = np.array(scores.kind) == "mentalmanip"
    ratios = np.linspace(0.3, 1.0, 15)
    out = {}
    for name, truth, predicted in (("technique", scores.tech_true, scores.tech),
                                   ("vulnerability", scores.vuln_true, scores.vuln)):
        labelled = mm & ~np.isnan(truth[:, 0])
        best = float(max(ratios, key=lambda r: _micro_f1(truth[labelled], _ratio_decisions(predicted[labelled], r))))
        setattr(model, f"{name}_ratio", best)
        out[f"dev_{name}_micro_f1"] = round(_micro_f1(truth[labelled], _ratio_decisions(predicted[labelled], best)), 4)
    return out


def turn_logits(head: ReplyPairHead, corpus: Corpus, bags: Sequence[Bag],
                keep: Callable[[str], bool] = lambda _: True) -> dict[int, float]:
    """The fine-tuned reply head's logit (uncalibrated) of every row of the conversations whose source `keep`s."""
    texts = corpus.data.texts
    out: dict[int, float] = {}
    for key, group in by_conversation(bags).items():
        if keep(key[0]):
            rows = np.concatenate([b.rows for b in group])
            out.update(zip(rows.tolist(), head.logits(conversation_pairs(texts, rows)).tolist(), strict=True))
    return out
