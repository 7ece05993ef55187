"""The embedded default detector: a turn-level manipulation model on CPU, quoting its evidence.

Every turn of the window is scored in the context of the turns before it
(`features`): how likely *this turn, by this speaker* is manipulative, per
technique and vulnerability, and how likely it is a scam request (one-time codes,
passwords, gift cards, remote access, secrecy). The window's probability is its
most suspicious turn's, so harmless talk never adds up to a flag however long it
goes on; findings point at the flagged turns and quote the sentence of each that
scores highest; the manipulator is the speaker of the flagged turns (the latest
one when the latest turn is flagged), never a guess over the window.

A turn's p(manipulative) is the network's weighted with the fine-tuned pair head's (1 : 2,
`reply_pair.dialogue_turn`), which reads what the turn does to the turn before it (learned from
turn-labelled dialogues and chatbot threads), when the artifact's head has a dialogue scale; in
chatbot threads the reply heads join as `_manipulation` says.

The decision threshold comes from the `sensitivity` setting (`[local] sensitivity`:
low, medium — the default, chosen so that ordinary conversations stay quiet —
or high, MentalManip's best macro-F1); `[local] threshold` overrides it. Details
and measured false-alarm rates: docs/model-card.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from guardian import locations
from guardian.conversation import Conversation, Turn
from guardian.detectors.base import Detector
from guardian.detectors.local.features import replace_turn_vector, turn_rows
from guardian.detectors.local.model import (
    TECHNIQUES,
    VULNERABILITIES,
    ArtifactError,
    TurnModel,
    TurnScores,
)
from guardian.detectors.local.register import spoken_register
from guardian.detectors.local.repetition import repeated_turns
from guardian.detectors.local.reply_pair import (
    chatbot_reply,
    dialogue_turn,
    reply_pairs,
    request_of,
)
from guardian.detectors.local.scam_requests import request_sentences
from guardian.encoding.sentence_encoder import SentenceEncoder, shared_encoder
from guardian.errors import ModelUnavailable
from guardian.findings import Assessment, Finding, Verdict
from guardian.grounding import Span, evidence_for, sentences

_SHARED: dict[str, TurnModel] = {}
_SHARED_LOCK = threading.Lock()

#: The pattern name of the scam-request finding.
SCAM_REQUEST = "scam_request"
SCAM_EXPLANATION = (
    "Scam request: asks for something a caller should never be given (a one-time code, a password, "
    "bank or card details, gift cards, remote access, secrecy) under urgency or borrowed authority"
)
#: Sentences of a flagged turn scored for the quote (long turns keep their first ones).
MAX_QUOTE_SENTENCES = 12


def shipped_artifact_dir() -> Path:
    return locations.package_dir() / "resources" / "turn_model"


def cache_artifact_dir() -> Path:
    return locations.cache_dir() / "turn_model"


def candidates() -> list[Path]:
    """Where the model is looked for: the configured folder, else the user's retrained copy, then the shipped one."""
    from guardian.config import settings

    configured = settings().local.artifact_dir
    if configured is not None:
        return [Path(configured).expanduser()]
    return [cache_artifact_dir(), shipped_artifact_dir()]


def load_model(directory: Path | None = None) -> TurnModel:
    """The first usable artifact, loaded once per process; one sentence when none is."""
    folders = [directory] if directory is not None else candidates()
    key = "|".join(str(p) for p in folders)
    with _SHARED_LOCK:
        model = _SHARED.get(key)
        if model is not None:
            return model
        reasons = []
        for folder in folders:
            if not folder.is_dir():
                reasons.append(f"{folder} does not exist")
                continue
            try:
                model = TurnModel.load(folder)
            except ArtifactError as exc:
                reasons.append(str(exc))
                continue
            _SHARED[key] = model
            return model
    raise ModelUnavailable(
        f"no usable local model ({'; '.join(reasons)}); rebuild it with `guardian train` "
        "(from a source checkout, which has the training data)"
    )


def forget_loaded_models() -> None:
    """Drop the process-wide model cache (after `guardian train` replaced an artifact; tests)."""
    with _SHARED_LOCK:
        _SHARED.clear()


@dataclass(frozen=True, slots=True)
class _Scored:
    """One window's turns and their scores (rows in window order)."""

    turns: tuple[Turn, ...]
    features: np.ndarray
    scores: TurnScores


class LocalModelDetector(Detector):
    """Turn-level MIL model over MiniLM features; loads its artifact once per process.

    `kind="assistant"` (what the LangChain integration creates): at the medium sensitivity the
    threshold is the one chosen on assistant dialogues alone, since an assistant's reply has no
    everyday quarrel to be mistaken for (docs/model-card.md).
    """

    name: ClassVar[str] = "local"
    description: ClassVar[str] = (
        "embedded turn-level manipulation model (CPU): probability, 11 techniques, 5 vulnerabilities, "
        "scam requests, quotes"
    )

    def __init__(
        self,
        *,
        artifact_dir: str | Path | None = None,
        threshold: float | None = None,
        sensitivity: str | None = None,
        kind: str | None = None,
        replies_by: str | None = None,
        encoder: SentenceEncoder | None = None,
    ) -> None:
        self._artifact_dir = Path(artifact_dir) if artifact_dir is not None else None
        self._threshold = threshold
        self._sensitivity = sensitivity
        self._kind = kind
        #: In chatbot threads, the assistant's speaker name: the fine-tuned reply head (one MiniLM pass per
        #: new turn) reads that speaker's turns only, the others keep the linear head (None: every turn).
        self._replies_by = replies_by
        self._encoder = encoder

    def warm_up(self) -> None:
        model = self.model()
        self.encoder().warm_up()
        if model.reply_pair is not None and (self._kind == "assistant" or model.reply_pair.dialogue_platt is not None):
            model.reply_pair.classifier.prepare()  # the int8 file is built (first run) or opened now, not on a turn

    def model(self) -> TurnModel:
        return load_model(self._artifact_dir)

    def encoder(self) -> SentenceEncoder:
        return self._encoder or shared_encoder()

    @property
    def sensitivity(self) -> str:
        if self._sensitivity is not None:
            return self._sensitivity
        from guardian.config import settings

        return settings().local.sensitivity

    @property
    def threshold(self) -> float:
        """Decision threshold: `[local] threshold` when set, else the sensitivity's."""
        return self._threshold_of(None)

    def _threshold_of(self, model: TurnModel | None) -> float:
        """`threshold`, with the model already looked up (each lookup reads the settings and resolves
        two folders: three per conversation were ~6 % of a bulk run's window scoring, issue 23)."""
        if self._threshold is not None:
            return self._threshold
        from guardian.config import settings

        configured = settings().local.threshold
        if configured is not None:
            return configured
        model = model or self.model()
        if self._kind == "assistant" and self.sensitivity == "medium" and "assistant" in model.thresholds:
            return model.thresholds["assistant"]
        return model.threshold(self.sensitivity)

    def _repeat_of(self, model: TurnModel) -> float | None:
        """The repeat threshold of the sensitivity (`repetition`): None where a threshold is set by hand
        (`threshold=`, `[local] threshold`: one number, one rule), in chatbot threads (a reply is judged
        on its own) and for an artifact calibrated without one."""
        if self._kind == "assistant" or self._threshold is not None:
            return None
        from guardian.config import settings

        if settings().local.threshold is not None:
            return None
        return model.repeat_thresholds.get(self.sensitivity)

    # -- analysis --------------------------------------------------------------------------------

    def analyze(self, window: Conversation) -> Assessment:
        return self.analyze_batch([window])[0]

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        """All windows' turns through the model at once (one encoder call for every new text)."""
        started = time.perf_counter()
        live = [n for n, w in enumerate(windows) if any(t.text.strip() for t in w.turns)]
        out = [self.empty(w) for w in windows]
        if not live:
            return out
        model = self.model()
        scored = self.score_windows([windows[n] for n in live], model=model)
        threshold = self._threshold_of(model)
        repeat = self._repeat_of(model)
        done = [self._assess(windows[n], s, threshold, model, repeat=repeat) for n, s in zip(live, scored, strict=True)]
        elapsed = (time.perf_counter() - started) * 1000 / len(live)
        for n, assessment in zip(live, done, strict=True):
            out[n] = assessment.model_copy(update={"latency_ms": elapsed})
        return out

    def prefetch_quotes(self, conversations: Sequence[Conversation]) -> None:
        """Encode in one pass the sentences that quoting the conversations' flagged turns will ask for.

        Why: bulk screening (issue 23) encodes the turns of many conversations together; the quotes'
        sentences were then the encoder's last small calls, one flagged turn at a time. A turn may be
        quoted when it scores at least the scam-request threshold (the lowest that flags); scored here
        in its whole conversation's context, so a long conversation's window may differ and encode a
        sentence on demand after all (and a turn whose request sentence falls under the threshold
        there gets one it does not need). Only a head start: a vector does not depend on its batch,
        so the assessments are the same with or without it.
        """
        live = [c for c in conversations if any(t.text.strip() for t in c.turns)]
        if not live:
            return
        model = self.model()
        threshold = self._threshold_of(model)
        floor = min(threshold, model.thresholds.get("high", threshold))
        texts: list[str] = []
        for scored in self.score_windows(live, model=model):
            s = scored.scores
            for i in np.flatnonzero(np.maximum(s.manipulation, s.scam) >= floor):  # as `_assess` flags and quotes
                text = scored.turns[int(i)].text
                requests = request_sentences(text)
                quoted = []
                if s.manipulation[i] >= threshold:
                    quoted.append(sentences(text))
                if s.scam[i] >= threshold or requests:
                    quoted.append(requests or sentences(text))
                for spans in quoted:
                    if len(spans[:MAX_QUOTE_SENTENCES]) > 1:
                        texts.extend(sp.text for sp in spans[:MAX_QUOTE_SENTENCES])
        if texts:
            self.encoder().encode(list(dict.fromkeys(texts)))

    def score_windows(self, windows: Sequence[Conversation], *, model: TurnModel | None = None) -> list[_Scored]:
        """Every turn of every window scored in its context (the window's earlier turns)."""
        model = model or self.model()
        texts = list(dict.fromkeys(t.text for w in windows for t in w.turns))
        vectors = dict(zip(texts, self.encoder().encode(texts), strict=True))
        rows = [turn_rows(w.turns, np.stack([vectors[t.text] for t in w.turns]), context=model.context)
                for w in windows]
        scores = model.score(np.vstack(rows), windows=[len(x) for x in rows])  # labels pool over each window
        turns = [t for w in windows for t in w.turns]
        pairs = [p for w in windows for p in reply_pairs(w.turns)]
        replies = self._replies(model, turns, pairs, scores.reply)
        if replies is not None:
            scores = replace(scores, reply=replies)
        dialogue = self._dialogue(model, pairs, scores.manipulation)
        if dialogue is not None:
            scores = replace(scores, manipulation=dialogue)
        out, at = [], 0
        for w, x in zip(windows, rows, strict=True):
            part = slice(at, at + len(x))
            at += len(x)
            out.append(_Scored(w.turns, x, TurnScores(
                manipulation=scores.manipulation[part], scam=scores.scam[part],
                techniques=scores.techniques[part], vulnerabilities=scores.vulnerabilities[part],
                logits=scores.logits[part], reply=None if scores.reply is None else scores.reply[part],
            )))
        return out

    def _replies(self, model: TurnModel, turns: Sequence[Turn], pairs: list[tuple[str, str]],
                 linear: np.ndarray | None) -> np.ndarray | None:
        """p(manipulative reply) of each (turn, turn before) pair in chatbot threads of a model with a fine-tuned
        reply head: its mean with the linear head's (`reply_pair.chatbot_reply`) on the assistant's turns
        (`replies_by`; every turn when unset), the linear head's elsewhere. None: the linear head answers
        alone everywhere (no chatbot thread, or no fine-tuned head)."""
        if self._kind != "assistant" or model.reply_pair is None:
            return None
        mine = [i for i, t in enumerate(turns) if self._replies_by is None or t.speaker == self._replies_by]
        out = np.zeros(len(pairs), np.float32) if linear is None else np.array(linear, np.float32)
        if mine:
            read = model.reply_pair.probability([pairs[i] for i in mine])
            out[mine] = chatbot_reply(read, None if linear is None else out[mine])
        return out

    def _dialogue(self, model: TurnModel, pairs: list[tuple[str, str]], network: np.ndarray) -> np.ndarray | None:
        """p(manipulative) of each turn outside chatbot threads, with a pair head that has a dialogue scale:
        weighted with the network's (`reply_pair.dialogue_turn`). None: the network answers alone."""
        head = model.reply_pair
        if self._kind == "assistant" or head is None or head.dialogue_platt is None or not pairs:
            return None
        spoken = model.reply_pair_spoken
        if spoken is None or spoken.dialogue_platt is None:
            return dialogue_turn(head.dialogue_probability(pairs), network)
        # A turn in a speech transcript's register is read by the head trained on both registers (`register`).
        register = [spoken_register(turn) for turn, _ in pairs]
        said = [i for i, is_spoken in enumerate(register) if is_spoken]
        written = [i for i, is_spoken in enumerate(register) if not is_spoken]
        read = np.zeros(len(pairs), np.float32)
        for rows, reader in ((said, spoken), (written, head)):
            if rows:
                read[rows] = reader.dialogue_probability([pairs[i] for i in rows])
        return dialogue_turn(read, network)

    def _assess(
        self, window: Conversation, scored: _Scored, threshold: float, model: TurnModel | None = None,
        *, repeat: float | None = None,
    ) -> Assessment:
        model = model or self.model()  # looked up once per batch: each lookup reads the settings and paths
        s = scored.scores
        manipulation = self._manipulation(s)
        combined = np.maximum(manipulation, s.scam)
        top = int(np.argmax(combined))
        probability = float(combined[top])
        # A turn that sounds manipulative or like a scam *and* asks for a code, a password, gift cards... is flagged
        # at the eager sensitivity's threshold (scam_requests).
        request_threshold = min(threshold, model.thresholds.get("high", threshold))
        requests = {
            i: spans for i in range(len(scored.turns))
            if combined[i] >= request_threshold and (spans := request_sentences(scored.turns[i].text))
        }
        scam_flagged = {i for i in range(len(scored.turns)) if s.scam[i] >= threshold or i in requests}
        # Under the threshold, a turn still counts when the same speaker says something as suspicious again
        # within the window (`repetition`): one sharp remark in a long call is not a pattern.
        repeated = repeated_turns(manipulation, [t.speaker for t in scored.turns],
                                  None if repeat is None or repeat >= threshold else repeat)
        manipulative = {i for i in range(len(scored.turns)) if manipulation[i] >= threshold} | repeated
        flagged = sorted(manipulative | scam_flagged)
        latest = len(scored.turns) - 1
        blamed = latest if latest in flagged else (max(flagged, key=lambda i: combined[i]) if flagged else top)
        findings: list[Finding] = []
        for i in flagged:
            turn = scored.turns[i]
            if i in manipulative:
                techs = s.techniques[i]
                chosen = [j for j in np.argsort(-techs) if techs[j] >= model.technique_ratio * techs.max()]
                vulns = s.vulnerabilities[i]
                vchosen = tuple(v for j, v in enumerate(VULNERABILITIES)
                                if vulns[j] >= model.vulnerability_ratio * vulns.max())
                quote = self._quote(model, scored, i, column="manipulation")
                again = "" if manipulation[i] >= threshold else (
                    f" (one of two or more suspicious turns by {turn.speaker} in this window)")
                for j in chosen:
                    technique = TECHNIQUES[j]
                    findings.append(Finding(
                        technique=technique,
                        score=float(np.clip(techs[j], 0.0, 1.0)),
                        evidence=(evidence_for(turn, quote),),
                        vulnerabilities=vchosen,
                        speaker=turn.speaker,
                        detector=self.name,
                        explanation=f"{technique.value}: {technique.definition}{again}",
                    ))
            if i in scam_flagged:
                quote = self._quote(model, scored, i, column="scam", spans=requests.get(i))
                findings.append(Finding(
                    pattern=SCAM_REQUEST,
                    score=float(np.clip(combined[i], 0.0, 1.0)),
                    evidence=(evidence_for(turn, quote),),
                    speaker=turn.speaker,
                    detector=self.name,
                    explanation=SCAM_EXPLANATION,
                ))
        return Assessment(
            conversation_id=window.id,
            turn=window.turns[-1].index,
            verdict=self._verdict(scored, manipulation, combined, threshold, request_threshold, repeat,
                                  manipulative=manipulative, scam_flagged=scam_flagged, repeated=repeated),
            probability=probability,
            decision=bool(flagged),
            threshold=threshold,
            techniques={t: float(s.techniques[blamed, j]) for j, t in enumerate(TECHNIQUES)},
            vulnerabilities={v: float(s.vulnerabilities[blamed, j]) for j, v in enumerate(VULNERABILITIES)},
            findings=tuple(findings),
            manipulator=scored.turns[blamed].speaker if flagged else None,
            detectors=(self.name,),
        )

    def _verdict(
        self, scored: _Scored, manipulation: np.ndarray, combined: np.ndarray, threshold: float,
        request_threshold: float, repeat: float | None, *, manipulative: set[int], scam_flagged: set[int],
        repeated: set[int],
    ) -> Verdict:
        """How the latest turn itself was read: which rule flagged it, with the numbers it compared
        (the window's probability is its most suspicious turn's, which may be an earlier one)."""
        latest = len(scored.turns) - 1
        turn = scored.turns[latest]
        own = float(np.clip(manipulation[latest], 0.0, 1.0))
        common = {"turn": turn.index, "sensitivity": None if self._threshold is not None else self.sensitivity}
        if latest in manipulative and manipulation[latest] >= threshold:
            return Verdict(score=own, threshold=threshold, rule="threshold", **common)
        if latest in manipulative and latest in repeated:
            partners = [i for i in repeated if i != latest and scored.turns[i].speaker == turn.speaker]
            other = max(partners, key=lambda i: (manipulation[i], i)) if partners else None
            return Verdict(
                score=own, threshold=threshold, rule="repeated", repeat_threshold=repeat,
                paired_with=scored.turns[other].index if other is not None else None,
                paired_score=float(np.clip(manipulation[other], 0.0, 1.0)) if other is not None else None,
                **common,
            )
        scam = float(np.clip(combined[latest], 0.0, 1.0))
        if latest in scam_flagged:
            by_head = float(scored.scores.scam[latest]) >= threshold
            return Verdict(score=scam, threshold=threshold if by_head else request_threshold,
                           rule="scam" if by_head else "scam_request", **common)
        return Verdict(score=own, threshold=threshold, **common)

    def _quote(
        self, model: TurnModel, scored: _Scored, i: int, *, column: str, spans: list[Span] | None = None
    ) -> Span:
        """The sentence of turn `i` (of `spans`, when given) scoring highest on `column`, in the turn's context."""
        turn = scored.turns[i]
        spans = (spans or sentences(turn.text))[:MAX_QUOTE_SENTENCES] or [Span(0, len(turn.text), turn.text)]
        if len(spans) == 1:
            return spans[0]
        vectors = self.encoder().encode([sp.text for sp in spans])
        rows = np.stack([replace_turn_vector(scored.features[i], v) for v in vectors])
        scores = model.score(rows)
        request = request_of(scored.turns, i)
        pairs = [(sp.text, request) for sp in spans]  # each sentence read as the reply to the same turn
        replies = self._replies(model, [turn] * len(spans), pairs, scores.reply)
        if replies is not None:
            scores = replace(scores, reply=replies)
        dialogue = self._dialogue(model, pairs, scores.manipulation)
        if dialogue is not None:
            scores = replace(scores, manipulation=dialogue)
        by_head = dialogue is not None or (self._kind == "assistant" and scores.reply is not None)
        values = scores.scam if column == "scam" else (self._manipulation(scores) if by_head else scores.logits)
        return spans[int(np.argmax(values))]

    def _manipulation(self, s: TurnScores) -> np.ndarray:
        """p(manipulative) of each turn: in chatbot threads (`kind="assistant"`) the higher of the network's
        and the reply head's, elsewhere the network's (docs/model-card.md)."""
        if self._kind == "assistant" and s.reply is not None:
            return np.maximum(s.manipulation, s.reply)
        return s.manipulation


def artifact_size_mb() -> float:
    """Size of the artifact the detector would load (shipped or cached), for `guardian bench`."""
    for directory in candidates():
        if (directory / "manifest.json").is_file():
            return round(sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 1e6, 2)
    return 0.0
