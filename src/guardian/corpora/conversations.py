"""Labelled conversations of other kinds than movie scripts (everyday, assistant, phone calls).

The schema is `data/conversations/README.md`'s: one JSON object a line with `id`,
`label` ("benign" | "scam"), `turns` [{speaker, text}] and `meta` (for calls,
`meta.roles` names the `Suspect`: the scammer of a scam call, the manipulator of an evaluation
dialogue). Training and every
held-out check split them by conversation with `split_of`, so a conversation is
in the same part wherever it is read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from guardian.conversation import Conversation, Turn
from guardian.corpora.turn_labels import Gold, TurnLabel, check_labels, parse_gold, parse_turn_label
from guardian.errors import InputError

Split = Literal["train", "dev", "test"]

#: Shares of each part (by a hash of the conversation id, so stable across files and runs).
TEST_SHARE = 0.20
DEV_SHARE = 0.15


@dataclass(frozen=True, slots=True)
class LabelledConversation:
    """A conversation with a conversation-level label and the name of the speaker it suspects, if any."""

    id: str
    kind: str
    label: str
    conversation: Conversation
    #: The speaker `meta.roles` names `Suspect`, whatever the label: a scam call's scammer, an
    #: evaluation dialogue's manipulator (who a flag should name).
    suspect: str | None = None
    #: Turn labels where the file gives them (`meta.manipulative_turns`, 0-based): the turns that
    #: manipulate; None when only the conversation is labelled.
    manipulative_turns: tuple[int, ...] | None = None
    #: The detailed label of each manipulative turn (techniques, vulnerabilities, verbatim span), where
    #: the file gives them (`meta.turn_labels`, docs/labelling.md).
    turn_labels: tuple[TurnLabel, ...] | None = None
    #: A MentalManip dialogue's own labels (`meta.gold`), which its turn labels must keep.
    gold: Gold | None = None
    #: What kind of talk it is (`meta.register`: film, scam call, emotional support, ...), where given.
    register: str | None = None

    @property
    def scammer(self) -> str | None:
        """The suspect of a scam call (training's positive bag); None for any other label."""
        return self.suspect if self.label == "scam" else None


def position(conversation_id: str, seed: int) -> float:
    """Where the id falls in [0, 1): SHA-1 of "seed:id" read as a number (stable across files and runs)."""
    digest = hashlib.sha1(f"{seed}:{conversation_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(conversation_id: str, *, seed: int = 17) -> Split:
    """train / dev / test by a hash of the id: the same conversation always lands in the same part."""
    share = position(conversation_id, seed)
    if share < TEST_SHARE:
        return "test"
    if share < TEST_SHARE + DEV_SHARE:
        return "dev"
    return "train"


def conversations_dir() -> Path:
    """`data/conversations` of the source checkout."""
    return Path(__file__).resolve().parents[3] / "data" / "conversations"


def load_conversations(path: str | Path, *, kind: str | None = None) -> list[LabelledConversation]:
    """Every conversation of a JSONL file; a line that is not a conversation is an InputError naming it."""
    path = Path(path)
    source = str(path)
    kind = kind or path.stem
    if not path.is_file():
        raise InputError("file not found", source=source)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text; re-save it as UTF-8", source=source) from None
    out: list[LabelledConversation] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("turns"), list):
                raise TypeError("turns must be a list")
            turns = tuple(
                Turn(index=i, speaker=str(t["speaker"]), text=str(t["text"])) for i, t in enumerate(row["turns"])
            )
            cid = str(row["id"])
            label = str(row.get("label") or "benign")
            meta = row.get("meta") or {}
            roles = meta.get("roles") or {}
            marked = meta.get("manipulative_turns")
            manipulative_turns = None if marked is None else tuple(sorted({int(i) for i in marked}))
            if manipulative_turns and not 0 <= manipulative_turns[0] <= manipulative_turns[-1] < len(turns):
                raise ValueError(f"manipulative_turns {list(manipulative_turns)} outside the {len(turns)} turns")
            details = meta.get("turn_labels")
            turn_labels = None if details is None else tuple(parse_turn_label(d, turns) for d in details)
            if turn_labels is not None and {d.turn for d in turn_labels} != set(manipulative_turns or ()):
                raise ValueError("turn_labels and manipulative_turns name different turns")
            gold = parse_gold(meta.get("gold"))
            if gold is not None and turn_labels is not None and (problems := check_labels(turn_labels, gold)):
                raise ValueError("; ".join(problems))
            register = meta.get("register")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else f"{type(exc).__name__}: {exc}"
            raise InputError(
                f"not a conversation object with id, label and turns [{{speaker, text}}] ({reason})",
                source=source,
                line=n,
            ) from None
        if cid in seen:
            raise InputError(f"conversation id {cid!r} appears twice", source=source, line=n)
        seen.add(cid)
        suspect = next((str(s) for s, r in roles.items() if r == "Suspect"), None)
        out.append(LabelledConversation(cid, kind, label, Conversation(id=cid, turns=turns), suspect,
                                        manipulative_turns, turn_labels, gold,
                                        None if register is None else str(register)))
    return out


def load_parts(
    paths: Sequence[str | Path], *, parts: Sequence[Split], seed: int = 17
) -> list[LabelledConversation]:
    """The conversations of `paths` whose split is in `parts`."""
    return [c for p in paths for c in load_conversations(p) if split_of(c.id, seed=seed) in parts]
