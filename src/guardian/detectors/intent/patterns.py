"""Pressure patterns read off the intent (face-act) stream.

A single face act is rarely alarming: asking is normal, refusing is normal. What
seed 002 (section 5.2) and the persuasion literature flag is what one side does
*after* the other side has said no. These rules look at the per-turn intents
(from the `intent` detector) and report a Finding, with verbatim quotes of both
the refusal and the pressing turn, at the turn where the pattern completes.

Definitions used below. A turn "counts as" a face act when the intent model's
top act is that act with probability >= ``min_score`` (default 0.5).
A *refusal* is a turn counting as ``sneg+`` (resists/refuses) or ``spos-``
(apologises for not complying). The look-back is ``horizon`` turns (default 8).

``persistent_pressure`` (a request repeated after a refusal)
    Turn t by speaker A counts as ``hneg-`` (presses the listener to do
    something); some other speaker B refused at r < t within the horizon; and A
    had already made a request (``hneg-``) before that refusal. So: ask -> no ->
    ask again. Score = P(request at t) x P(refusal), +0.1 for each further refusal
    by B since A's first request (capped at 1). Evidence: the refusal, then the
    repeated request.

``criticism_after_refusal``
    Turn t by A criticises the listener and some other speaker B refused within
    the horizon. "Criticises" = the turn counts as ``hpos-`` (criticises or
    doubts the listener), or one of its sentences addresses the listener
    ("you"/"your") with an explicit put-down (selfish, heartless, greedy,
    pathetic, shame on you, ...): the model sees few criticisms from the asking
    side (48 in its training data), so a plain insult must not slip through.
    Score = P(criticism) x P(refusal), with P(criticism) = 0.6 when only the
    put-down rule fired. Evidence: the refusal, then the criticism.

``guilt_appeal`` (seed 002 5.2.1: "ER questions EE's spending habits" and "ER
mentions impoverished people ... guilt-tripping EE's inaction")
    A sentence of turn t by A addresses the listener ("you"/"your") and either
    (a) mentions the listener's spending (spend, afford, coffee, shopping, ...)
    as a question or in a turn that counts as ``hpos-``/``hneg-``, or (b)
    mentions suffering (dying, starving, poverty, ...) together with the
    listener's inaction or comparative comfort ("while you", "you won't",
    "how can you", "lucky", ...) or in a turn that counts as ``hpos-``;
    and the listener B hesitated or refused within the horizon, or the turn
    itself counts as ``hpos-``; or (c), the everyday guilt trip (issue 25), a
    sentence of a turn whose top act is ``hneg-``/``hpos-`` (at any probability) makes the speaker's
    affection the price of compliance ("If you really loved me, you would ...",
    "if you cared about me"), with or without a refusal before it. Score = 0.5 +
    0.5 x P(act) when the turn counts as ``hpos-``/``hneg-``, else 0.5. Evidence:
    that sentence (plus the refusal when there is one). Targets the
    Over-responsibility vulnerability: the listener is made to carry blame for
    others' suffering, or for the relationship.

The rules are deliberately simple and inspectable; they see only intents and the
words of the turns, never gold labels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from guardian.conversation import Conversation, Evidence, Turn
from guardian.findings import Finding, Intent
from guardian.grounding import Span, evidence_for, sentences
from guardian.taxonomy import FaceAct, Vulnerability

PERSISTENT_PRESSURE = "persistent_pressure"
CRITICISM_AFTER_REFUSAL = "criticism_after_refusal"
GUILT_APPEAL = "guilt_appeal"
PATTERNS = (PERSISTENT_PRESSURE, CRITICISM_AFTER_REFUSAL, GUILT_APPEAL)

REFUSALS = (FaceAct.SNEG_PLUS, FaceAct.SPOS_MINUS)

_YOU = re.compile(r"\b(you|your|you're|youre|yourself|u|ur)\b", re.I)
_REQUEST_CUE = re.compile(r"\?|\b(please|would you|could you|can you|will you|how about|why not|just)\b", re.I)
_CRITICISM_CUE = re.compile(r"\b(you|your)\b", re.I)
_PUT_DOWN = re.compile(
    r"\b(selfish|heartless|greedy|stingy|cheap|cheapskate|pathetic|shame on you|ashamed|disgrac\w*|"
    r"lazy|cruel|uncaring|careless|cold-hearted|coldhearted|hypocrite|hypocritical|liar|ridiculous|stupid|"
    r"idiot\w*|useless|worthless|terrible person|bad person|horrible person|you people|how dare you)\b",
    re.I,
)
PUT_DOWN_SCORE = 0.6
_SPENDING = re.compile(
    r"\b(spend|spends|spent|spending|waste|wasting|wasted|afford|buy|buying|bought|coffee|coffees|latte|"
    r"starbucks|netflix|eating out|takeout|take-out|fast food|shopping|vacation|cigarettes|drinks|"
    r"money on|splurge)\b",
    re.I,
)
_SUFFERING = re.compile(
    r"\b(dying|die|dies|died|death|starv\w*|suffer\w*|hunger|hungry|poverty|impoverished|poor|homeless|"
    r"orphan\w*|malnourished|killed|lives)\b",
    re.I,
)
_INACTION = re.compile(
    r"\b(while you|you won't|you wont|you don't|you dont|you can't|you cant|you refuse|you'd rather|"
    r"you would rather|how can you|how could you|don't you care|dont you care|because of you|your fault|"
    r"on your conscience|lucky|privileged|fortunate|turn your back|look away|do nothing|nothing at all|"
    r"can't even|cant even|not even|so little|just a few|only a few|your choice)\b",
    re.I,
)


_CONDITIONAL_AFFECTION = re.compile(
    r"\bif you (really |truly |actually |even )?(loved|love|cared|care|respected|respect|trusted|trust|valued)\b"
    r"( about)? (me|us)\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class PatternConfig:
    min_score: float = 0.5
    horizon: int = 8


def _counts(intent: Intent | None, acts: Sequence[FaceAct], cfg: PatternConfig) -> bool:
    return intent is not None and intent.face_act in acts and intent.score >= cfg.min_score


def _quote(turn: Turn, cue: re.Pattern[str]) -> Evidence:
    """The sentence of `turn` that carries the cue (the first one if none does)."""
    spans = sentences(turn.text) or [Span(0, len(turn.text), turn.text)]
    chosen = next((s for s in spans if cue.search(s.text)), spans[0])
    return evidence_for(turn, chosen)


def _refusal_before(
    conversation: Conversation, by_turn: dict[int, Intent], t: Turn, cfg: PatternConfig
) -> list[tuple[Turn, Intent]]:
    """Refusals by other speakers within the horizon before turn t, newest first."""
    out: list[tuple[Turn, Intent]] = []
    for prev in reversed(conversation.turns):
        if prev.index >= t.index:
            continue
        if t.index - prev.index > cfg.horizon:
            break
        intent = by_turn.get(prev.index)
        if prev.speaker != t.speaker and intent is not None and _counts(intent, REFUSALS, cfg):
            out.append((prev, intent))
    return out


def patterns_at(
    conversation: Conversation,
    intents: Sequence[Intent],
    turn: int,
    *,
    detector: str = "intent",
    config: PatternConfig | None = None,
) -> list[Finding]:
    """Patterns that complete at conversation turn `turn` (each is reported once, where it happens)."""
    cfg = config or PatternConfig()
    by_turn = {i.turn: i for i in intents}
    try:
        t = conversation.turn(turn)
    except KeyError:
        return []
    intent = by_turn.get(turn)
    if intent is None or not t.text.strip():
        return []
    refusals = _refusal_before(conversation, by_turn, t, cfg)
    findings: list[Finding] = []

    if refusals and _counts(intent, (FaceAct.HNEG_MINUS,), cfg):
        first_refusal = refusals[-1][0]
        earlier_request = any(
            p.speaker == t.speaker and p.index < first_refusal.index
            and first_refusal.index - p.index <= cfg.horizon
            and _counts(by_turn.get(p.index), (FaceAct.HNEG_MINUS,), cfg)
            for p in conversation.turns
        )
        if earlier_request:
            ref_turn, ref_intent = refusals[0]
            score = min(1.0, intent.score * ref_intent.score + 0.1 * (len(refusals) - 1))
            findings.append(Finding(
                pattern=PERSISTENT_PRESSURE, score=round(score, 4), speaker=t.speaker, detector=detector,
                evidence=(_quote(t, _REQUEST_CUE),),
                explanation=f"{t.speaker} repeats a request after {ref_turn.speaker} refused at turn "
                f"{ref_turn.index} ({len(refusals)} refusal(s) in the last {cfg.horizon} turns).",
            ))

    put_down = _put_down(t)
    if refusals and (_counts(intent, (FaceAct.HPOS_MINUS,), cfg) or put_down is not None):
        ref_turn, ref_intent = refusals[0]
        by_model = intent.face_act is FaceAct.HPOS_MINUS and intent.score >= cfg.min_score
        findings.append(Finding(
            pattern=CRITICISM_AFTER_REFUSAL,
            score=round((intent.score if by_model else PUT_DOWN_SCORE) * ref_intent.score, 4),
            speaker=t.speaker, detector=detector,
            evidence=(put_down or _quote(t, _CRITICISM_CUE),),
            explanation=f"{t.speaker} criticises or doubts {ref_turn.speaker} after they refused at turn "
            f"{ref_turn.index}.",
        ))

    guilt = _guilt_sentence(t, intent, bool(refusals), cfg)
    if guilt is not None:
        pressing = _counts(intent, (FaceAct.HPOS_MINUS, FaceAct.HNEG_MINUS), cfg)
        findings.append(Finding(
            pattern=GUILT_APPEAL, score=round(0.5 + 0.5 * intent.score if pressing else 0.5, 4),
            speaker=t.speaker, detector=detector, evidence=(guilt,),
            vulnerabilities=(Vulnerability.OVER_RESPONSIBILITY,),
            explanation=f"{t.speaker} makes the listener responsible for others' suffering, questions "
            "their spending or makes affection conditional on compliance"
            + (f" after they hesitated at turn {refusals[0][0].index}." if refusals else "."),
        ))
    return findings


def _put_down(t: Turn) -> Evidence | None:
    """The first sentence that addresses the listener with an explicit put-down."""
    for span in sentences(t.text):
        if _YOU.search(span.text) and _PUT_DOWN.search(span.text):
            return evidence_for(t, span)
    return None


def _guilt_sentence(t: Turn, intent: Intent, after_refusal: bool, cfg: PatternConfig) -> Evidence | None:
    critical = _counts(intent, (FaceAct.HPOS_MINUS,), cfg)
    pressing = critical or _counts(intent, (FaceAct.HNEG_MINUS,), cfg)
    # The conditional-affection words are the pressure themselves: the model need only agree that the
    # turn presses or criticises (its top act), however unsure (round 3's everyday side spreads its
    # probability more: "If you really loved me, ..." is hpos- at .34 where round 1 said .53).
    if intent.face_act in (FaceAct.HPOS_MINUS, FaceAct.HNEG_MINUS):
        for span in sentences(t.text):
            if _CONDITIONAL_AFFECTION.search(span.text):
                return evidence_for(t, span)
    if not (after_refusal or critical):
        return None
    for span in sentences(t.text):
        s = span.text
        if not _YOU.search(s):
            continue
        spending = _SPENDING.search(s) and ("?" in s or pressing)
        suffering = _SUFFERING.search(s) and (_INACTION.search(s) or critical)
        if spending or suffering:
            return evidence_for(t, span)
    return None


def derive_patterns(
    conversation: Conversation, intents: Sequence[Intent], *, detector: str = "intent",
    config: PatternConfig | None = None,
) -> list[Finding]:
    """Every pattern in a whole conversation, turn by turn (reports, evaluation)."""
    out: list[Finding] = []
    for t in conversation.turns:
        out.extend(patterns_at(conversation, intents, t.index, detector=detector, config=config))
    return out
