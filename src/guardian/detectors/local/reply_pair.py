"""The reply head read as a pair: is this turn a manipulative answer to the message before it?

Why a fine-tuned pair and not the reply's own sentence vector: quiet manipulation in a chatbot
reply (dodging a question about fees, guilt about the bot's feelings, a veiled threat, "you're
misremembering again") is about what the reply *does* to the request, which a topical vector of the
reply alone hardly holds. The linear head over the reply's frozen MiniLM vector blocked 6 of 32
held-out manipulative replies by writers it never saw; MiniLM fine-tuned on (reply, request) pairs
separates them far better (lab/turn_reply_finetune.py, docs/history.md "Turn model").

Read in chatbot threads (`LocalModelDetector(kind="assistant")`, what the LangChain integration
creates) with the linear head (`chatbot_reply`), and, when the head has a dialogue scale, in every other
conversation with the network (`dialogue_turn`: it learned from turn-labelled dialogues which turn
manipulates); once per (turn, turn before) pair: a window slides over a thread turn by turn, so the
same pairs come back and are answered from a small cache. The chatbot probability is Platt-scaled on
the development part (a thread's score is its highest turn), the dialogue one turn by turn; both scales
are stored in the turn model's manifest. Stored as `reply_pair.npz` beside the turn model's weights (the tuned layers
as int8 with a scale per row, ~11 MB), loaded on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
from cachetools import LRUCache

from guardian.conversation import Turn
from guardian.encoding.pair_classifier import PairClassifier

REPLY_PAIR_FILE = "reply_pair.npz"
#: The pair head that reads turns in a speech transcript's register (`register.spoken_register`).
SPOKEN_PAIR_FILE = "reply_pair_spoken.npz"
#: The classifier's two classes, in head order: the margin between them is the reply logit.
CLASSES = ("benign", "manipulative")
#: The second segment of a thread's first turn (nothing before it), as the intent model's.
NO_REQUEST = "start"
#: (reply, request) pairs whose logit is kept: a thread's window re-reads its turns at every new turn.
CACHE_SIZE = 4096


class ReplyPairs(PairClassifier):
    """The fine-tuned (reply, request) classifier of the turn model."""

    what: ClassVar[str] = "the turn model's reply head"
    rebuild: ClassVar[str] = "rebuild the turn model with `guardian train`"
    disable: ClassVar[str] = "point [local] artifact_dir at a turn model without one"
    cache: ClassVar[str] = "turn_int8"


def chatbot_reply(pair: np.ndarray, linear: np.ndarray | None) -> np.ndarray:
    """p(manipulative reply) in chatbot threads: the mean of the fine-tuned pair head's and the linear head's.

    Why both: they fail differently. The pair head reads what a reply does to the request, but a reply's
    first sentence alone (what streaming screens before releasing it) can fall outside what it learned:
    "Stop being so paranoid and difficult." answering a user unsure about sharing a password read .11
    there, .90 by the linear head over its vector. Averaged, the held-out threads move by one or two
    (docs/history.md "Turn model") and no single head's blind spot releases a sentence.
    """
    if linear is None:
        return pair
    return np.asarray((pair + linear) / 2, dtype=np.float32)


#: The pair head's share of a turn's p(manipulative) outside chatbot threads (`dialogue_turn`).
DIALOGUE_PAIR_SHARE = 2 / 3


def dialogue_turn(pair: np.ndarray, network: np.ndarray) -> np.ndarray:
    """p(manipulative) of a turn in a conversation that is not a chatbot thread: the network's and the pair
    head's (read with its dialogue scale, `ReplyPairHead.dialogue_probability`), weighted 1 : 2.

    Why both: the network learned MentalManip's film dialogues and the scam calls, and alone it flags the
    victim's pushback ("Are you seriously threatening me?") before the manipulator's quiet denial ("I never
    said that"); the pair head learned from turn labels what a turn does to the one before it
    (`data/dialogues/turns.jsonl`), but never saw a film. The weights were chosen on the dev part
    (`lab/turn_dialogue_rules.py`): against the plain mean, the same recall of manipulative dialogues with the
    manipulator named first in all of them and fewer fair arguments flagged
    (docs/history.md "Turn model").
    """
    return np.asarray(DIALOGUE_PAIR_SHARE * pair + (1 - DIALOGUE_PAIR_SHARE) * network, dtype=np.float32)


def request_of(turns: Sequence[Turn], i: int) -> str:
    """What turn `i` answers: the turn before it, `NO_REQUEST` for the first."""
    return turns[i - 1].text if i else NO_REQUEST


def reply_pairs(turns: Sequence[Turn]) -> list[tuple[str, str]]:
    """(turn, the turn before it) for each turn: what the reply head reads (training reads the same)."""
    return [(t.text, request_of(turns, i)) for i, t in enumerate(turns)]


class ReplyPairHead:
    """p(manipulative reply) of (reply, request) pairs: the classifier's logit margin, Platt-scaled."""

    def __init__(self, *, classifier: ReplyPairs | None = None, path: Path | None = None,
                 platt: tuple[float, float] = (1.0, 0.0), dialogue_platt: tuple[float, float] | None = None) -> None:
        if classifier is None and path is None:
            raise ValueError("a reply head needs a classifier or the file that holds one")
        self._classifier = classifier
        self.path = path
        self.platt = platt
        #: The scale of a turn of any other conversation (fitted on the dev part's turn-labelled dialogues
        #: and ordinary turns, turn by turn); None: the head is read in chatbot threads only.
        self.dialogue_platt = dialogue_platt
        self._cache: LRUCache[tuple[str, str], float] = LRUCache(maxsize=CACHE_SIZE)
        self._lock = threading.Lock()

    @property
    def classifier(self) -> ReplyPairs:
        """The classifier, read from its file on first use (the turn model loads without it)."""
        with self._lock:
            if self._classifier is None:
                assert self.path is not None
                self._classifier = ReplyPairs.load(self.path.parent, file=self.path.name)
            return self._classifier

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(n,) uncalibrated logits: manipulative minus benign."""
        with self._lock:
            known = {p: self._cache[p] for p in pairs if p in self._cache}
        todo = list(dict.fromkeys(p for p in pairs if p not in known))
        if todo:
            z = self.classifier.logits(todo)
            margins = z[:, CLASSES.index("manipulative")] - z[:, CLASSES.index("benign")]
            with self._lock:
                for p, m in zip(todo, margins, strict=True):
                    self._cache[p] = known[p] = float(m)
        return np.array([known[p] for p in pairs], dtype=np.float32)

    def probability(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.calibrated(self.logits(pairs))

    def dialogue_probability(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """p(manipulative turn) outside chatbot threads (the dialogue scale); needs `dialogue_platt`."""
        if self.dialogue_platt is None:
            raise ValueError("this reply head has no dialogue scale")
        return self.calibrated(self.logits(pairs), platt=self.dialogue_platt)

    def calibrated(self, logits: np.ndarray, *, platt: tuple[float, float] | None = None) -> np.ndarray:
        """Logits (`logits`) as probabilities: the Platt scale (the chatbot one unless `platt` is given)."""
        a, b = platt or self.platt
        return np.asarray(1.0 / (1.0 + np.exp(-(a * np.asarray(logits, np.float64) + b))), dtype=np.float32)

    def save(self, directory: Path, *, file: str = REPLY_PAIR_FILE) -> Path:
        """The classifier as `file` in `directory` (int8 layers); the Platt scale goes in the manifest."""
        self.classifier.save(directory, file=file, int8=True)
        return directory / file
