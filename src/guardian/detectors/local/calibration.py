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
from guardian.detectors.local.repetition import repeat_evidence
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
#: Highest share of long ordinary conversations (dev conversations of a kind joined `LONG_JOIN` at a time,
#: 40-100 turns: a phone call's length) flagged at some turn, per sensitivity (`repetition`).
LONG_BUDGET = {"low": 0.02, "medium": 0.05}
LONG_JOIN = 5
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
    #: Per conversation, who said each turn (in order): the repetition rule counts a speaker's turns.
    turn_speakers: list[list[str]] | None = None

    def manipulation(self, platt_ab: tuple[float, float]) -> np.ndarray:
        """Each conversation's highest p(manipulative turn) outside chatbot threads, under the network's
        Platt scale `platt_ab`: the network's alone, or weighted with the pair head's (`dialogue_turn`)."""
        if self.turn_logits is None or self.turn_dialogue is None:
            return platt_probability(self.manip_logit, platt_ab)
        return np.array([float(turns.max()) for turns in self.turn_manipulation(platt_ab)])

    def turn_manipulation(self, platt_ab: tuple[float, float]) -> list[np.ndarray]:
        """Every turn's p(manipulative) outside chatbot threads, per conversation, in turn order."""
        if self.turn_logits is None:
            return [np.array([v]) for v in platt_probability(self.manip_logit, platt_ab)]
        network = [platt_probability(z, platt_ab).astype(np.float32) for z in self.turn_logits]
        if self.turn_dialogue is None:
            return network
        return [dialogue_turn(pair, z) for z, pair in zip(network, self.turn_dialogue, strict=True)]


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
    speakers: list[list[str]] = []
    for (source, _), bags in groups.items():
        rows = np.sort(np.concatenate([b.rows for b in bags]))  # turn order (a scam call's bags split it by speaker)
        speakers.append([corpus.data.speakers[int(r)] for r in rows] if corpus.data.speakers else [""] * len(rows))
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
                     per_turn_dialogue if dialogue_scale is not None else None, speakers)


def _ratio_decisions(scores: np.ndarray, ratio: float) -> np.ndarray:
    return scores >= ratio * scores.max(axis=1, keepdims=True)


def _macro_f1(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean F1 of the two classes (MentalManip's dialogue-level measure)."""
    f = []
    for cls in (True, False):
        tp = float(((truth == cls) & (pred == cls)).sum())
        f.append(2 * tp / max(float((truth == cls).sum() + (pred == cls).sum()), 1.0))
    return float(np.mean(f))


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

    def macro_f1(threshold: float) -> float:
        return _macro_f1(scores.positive[mm], combined[mm] >= threshold)

    high = max(grid, key=macro_f1)
    thresholds = {"high": float(high)}
    ordinary = sorted({k for k in kinds if k.endswith(":benign") and k.split(":")[0] not in HAND_WRITTEN})
    repeats = repeat_scores(scores, model.manip_platt, combined, ordinary)
    thresholds.update(quiet_thresholds(combined, repeats, kinds, scores.positive, ordinary, floor=float(high)))
    model.repeat_thresholds = {level: thresholds.pop(f"{level}_repeat") for level in ("medium", "low")}
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
    metrics: dict[str, object] = {"thresholds": thresholds, "repeat_thresholds": dict(model.repeat_thresholds)}
    for level, threshold in thresholds.items():
        repeat = model.repeat_thresholds.get(level)
        flagged = (bot if level == "assistant" else combined) >= threshold
        if repeat is not None:
            flagged = repeats.flagged(combined, threshold, repeat)
        per_kind = {k: round(float(flagged[kinds == k].mean()), 4) for k in sorted(set(kinds))}
        if repeat is not None:
            for k in repeats.joined:
                per_kind[f"{k.split(':')[0]}+long:benign"] = round(repeats.long_share(k, threshold, repeat), 4)
        y, p = scores.positive[mm], flagged[mm]
        per_kind["mentalmanip_accuracy"] = round(float((y == p).mean()), 4)
        per_kind["mentalmanip_macro_f1"] = round(_macro_f1(y, p), 4)
        per_kind["mentalmanip_fpr"] = round(float(p[~y].mean()), 4)
        metrics[f"dev_flagged_{level}"] = per_kind
    metrics.update(tune_label_ratios(model, scores))
    return metrics


@dataclass(frozen=True, slots=True)
class RepeatScores:
    """What the repetition rule reads of the dev conversations: each one's `repeat_evidence`, and for
    each ordinary kind its conversations joined `LONG_JOIN` at a time into long ones (highest combined
    score, repeat evidence across the joins)."""

    single: np.ndarray
    joined: dict[str, tuple[np.ndarray, np.ndarray]]

    def flagged(self, combined: np.ndarray, threshold: float, repeat: float) -> np.ndarray:
        """Which dev conversations the pair (threshold, repeat threshold) flags at some turn."""
        return (combined >= threshold) | (self.single >= repeat)

    def long_share(self, kind: str, threshold: float, repeat: float) -> float:
        """The share of `kind`'s joined long conversations the pair flags."""
        top, again = self.joined[kind]
        return float(((top >= threshold) | (again >= repeat)).mean())


def repeat_scores(scores: DevScores, platt_ab: tuple[float, float], combined: np.ndarray,
                  ordinary: Sequence[str]) -> RepeatScores:
    """The repeat evidence of every dev conversation and of the `ordinary` kinds' joined ones (`combined`:
    each conversation's highest p(manipulative) or p(scam))."""
    turns = scores.turn_manipulation(platt_ab)
    speakers = scores.turn_speakers or [[""] * len(t) for t in turns]
    single = np.array([repeat_evidence(t, who) for t, who in zip(turns, speakers, strict=True)])
    kinds = np.array(scores.kind)
    joined: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k in ordinary:
        members = np.flatnonzero(kinds == k)
        tops, agains = [], []
        for start in range(0, len(members) - LONG_JOIN + 1, LONG_JOIN):
            chunk = members[start: start + LONG_JOIN]
            # Two speakers throughout, as in one long call: each conversation's first speaker is "A".
            who = [("A" if s == speakers[c][0] else "B") for c in chunk for s in speakers[c]]
            tops.append(float(combined[chunk].max()))
            agains.append(repeat_evidence(np.concatenate([turns[c] for c in chunk]), who))
        if tops:
            joined[k] = (np.array(tops), np.array(agains))
    return RepeatScores(single=single, joined=joined)


def quiet_thresholds(combined: np.ndarray, repeats: RepeatScores, kinds: np.ndarray, positive: np.ndarray,
                     ordinary: Sequence[str], *, floor: float) -> dict[str, float]:
    """Medium and low: a threshold and a repeat threshold (`repetition`), `{level}` and `{level}_repeat`.

    Among the pairs (at or over `floor`, the repeat one at most the other) that keep every ordinary kind
    within its budget, both as its conversations are and joined into long ones (`LONG_BUDGET`), the pair
    that flags the most of the dev part's manipulative hand-written dialogues and scam calls (their mean
    share; MentalManip's manipulative dialogues when there are none); the higher thresholds on a tie.
    A repeat threshold equal to the threshold is the plain rule, so it stays a candidate."""
    grid = np.round(np.linspace(0.05, 0.99, 95), 4)
    targets = [k for k in sorted(set(kinds.tolist())) if not k.startswith(("mentalmanip", "chatbot"))
               and not k.endswith(":benign")] or ["mentalmanip"]
    out: dict[str, float] = {}
    for level in ("medium", "low"):
        lowest = max(floor, out.get("medium", 0.0))
        best: tuple[tuple[float, float, float], float, float] | None = None
        for t in (float(v) for v in grid if v >= lowest):
            for r in (float(v) for v in grid if floor <= v <= t):
                flagged = repeats.flagged(combined, t, r)
                if not _within_budgets(flagged, kinds, ordinary, level, repeats, t, r):
                    continue
                recall = float(np.mean([flagged[(kinds == k) & positive].mean() for k in targets
                                        if ((kinds == k) & positive).any()] or [0.0]))
                key = (recall, t, r)
                if best is None or key > best[0]:
                    best = (key, t, r)
        t, r = (best[1], best[2]) if best is not None else (0.99, 0.99)
        out[level], out[f"{level}_repeat"] = t, r
    return out


def _within_budgets(flagged: np.ndarray, kinds: np.ndarray, ordinary: Sequence[str], level: str,
                    repeats: RepeatScores, t: float, r: float) -> bool:
    for k in ordinary:
        budget = CALLS_BUDGET[level] if k.startswith("calls") else FALSE_ALARM_BUDGET[level]
        if float(flagged[kinds == k].mean()) > budget:
            return False
        if k in repeats.joined and repeats.long_share(k, t, r) > LONG_BUDGET[level]:
            return False
    return True


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
