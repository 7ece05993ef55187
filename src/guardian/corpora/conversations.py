"""Labelled conversations of other kinds than movie scripts (everyday, assistant, phone calls).

The schema is `data/conversations/README.md`'s: one JSON object a line with `id`,
`label` ("benign" | "scam"), `turns` [{speaker, text}] and `meta` (for calls,
`meta.roles` names the `Suspect`: the scammer of a scam call). Training and every
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
from guardian.errors import InputError

Split = Literal["train", "dev", "test"]

#: Shares of each part (by a hash of the conversation id, so stable across files and runs).
TEST_SHARE = 0.20
DEV_SHARE = 0.15


@dataclass(frozen=True, slots=True)
class LabelledConversation:
    """A conversation with a conversation-level label and, for calls, the scammer's name."""

    id: str
    kind: str
    label: str
    conversation: Conversation
    #: The speaker the source names as the scammer (scam calls only).
    scammer: str | None = None


def split_of(conversation_id: str, *, seed: int = 17) -> Split:
    """train / dev / test by a hash of the id: the same conversation always lands in the same part."""
    digest = hashlib.sha1(f"{seed}:{conversation_id}".encode()).digest()
    share = int.from_bytes(digest[:8], "big") / 2**64
    if share < TEST_SHARE:
        return "test"
    if share < TEST_SHARE + DEV_SHARE:
        return "dev"
    return "train"


def conversations_dir() -> Path:
    """`data/conversations` of the source checkout."""
    return Path(__file__).resolve().parents[3] / "data" / "conversations"


def load_conversations(path: str | Path, *, kind: str | None = None) -> list[LabelledConversation]:
    """Every conversation of one JSONL file; a malformed line is an InputError naming it."""
    path = Path(path)
    kind = kind or path.stem
    out: list[LabelledConversation] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError("file not found", source=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text; re-save it as UTF-8", source=str(path)) from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            turns = tuple(
                Turn(index=i, speaker=str(t["speaker"]), text=str(t["text"]))
                for i, t in enumerate(row["turns"])
            )
            cid = str(row["id"])
            label = str(row.get("label", "benign"))
            roles = (row.get("meta") or {}).get("roles") or {}
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"not a conversation object ({exc})", source=str(path), line=n) from None
        scammer = next((s for s, r in roles.items() if r == "Suspect"), None) if label == "scam" else None
        out.append(LabelledConversation(cid, kind, label, Conversation(id=cid, turns=turns), scammer))
    return out


def load_parts(
    paths: Sequence[str | Path], *, parts: Sequence[Split], seed: int = 17
) -> list[LabelledConversation]:
    """The conversations of `paths` whose split is in `parts`."""
    return [c for p in paths for c in load_conversations(p) if split_of(c.id, seed=seed) in parts]
