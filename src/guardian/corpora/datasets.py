"""Loaders for the labelled data the project carries (data/README.md).

Training, the example store and evaluation all read the corpora from here (they lived
in `guardian.eval` once, and training reached up into evaluation to get them).

Read with the csv module: pandas' default parser misreads some MentalManip rows.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from guardian.conversation import Conversation
from guardian.errors import InputError
from guardian.locations import bundled_data_dir
from guardian.readers import parse_transcript
from guardian.taxonomy import FaceAct, Technique, Vulnerability, parse_label_list

MENTALMANIP_COLUMNS = ("ID", "Dialogue", "Manipulative", "Technique", "Vulnerability")
FACEACTS_COLUMNS = ("conversation_id", "turn", "speaker", "utterance", "face_act")


@dataclass(frozen=True, slots=True)
class LabelledDialogue:
    id: str
    conversation: Conversation
    manipulative: bool
    techniques: tuple[Technique, ...]
    vulnerabilities: tuple[Vulnerability, ...]


@dataclass(frozen=True, slots=True)
class FaceActUtterance:
    conversation_id: str
    turn: int
    speaker: str
    utterance: str
    face_act: FaceAct
    donated: bool | None
    #: The turn just before, when the file holds a conversation from the middle (the everyday set keeps
    #: a few consecutive turns of each conversation): context for the first of them.
    previous: str | None = None


def mentalmanip_path(version: str = "con") -> Path:
    return bundled_data_dir() / "mentalmanip" / f"mentalmanip_{version}.csv"


def faceacts_path() -> Path:
    return bundled_data_dir() / "faceacts" / "faceacts.csv"


def key_phrases_path() -> Path:
    return bundled_data_dir() / "mentalmanip" / "key_phrases.txt"


def _open_csv(path: Path, required: tuple[str, ...]) -> tuple[list[dict[str, str]], str]:
    source = str(path)
    if not path.is_file():
        raise InputError("file not found", source=source)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text; re-save the CSV as UTF-8", source=source) from None
    reader = csv.DictReader(text.splitlines(keepends=True))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {', '.join(required)}", source=source, line=1
        )
    return list(reader), source


def load_mentalmanip(path: str | Path | None = None) -> list[LabelledDialogue]:
    """MentalManip-format CSV (ID, Dialogue, Manipulative, Technique, Vulnerability)."""
    path = Path(path) if path is not None else mentalmanip_path()
    rows, source = _open_csv(path, MENTALMANIP_COLUMNS)
    out: list[LabelledDialogue] = []
    for n, row in enumerate(rows, start=2):
        try:
            conversation = parse_transcript(row["Dialogue"], source=f"{source} row {row['ID']}", conversation_id=row["ID"])
            label = row["Manipulative"].strip()
            if label not in ("0", "1"):
                raise ValueError(f"Manipulative must be 0 or 1, got {label!r}")
            techniques = tuple(Technique.parse(t) for t in parse_label_list(row["Technique"] or ""))
            vulnerabilities = tuple(Vulnerability.parse(v) for v in parse_label_list(row["Vulnerability"] or ""))
        except ValueError as exc:
            raise InputError(str(exc), source=source, line=n) from None
        out.append(LabelledDialogue(row["ID"], conversation, label == "1", techniques, vulnerabilities))
    return out


def load_faceacts(path: str | Path | None = None) -> list[FaceActUtterance]:
    """Face-act CSV (conversation_id, turn, speaker, utterance, face_act[, donated][, previous])."""
    path = Path(path) if path is not None else faceacts_path()
    rows, source = _open_csv(path, FACEACTS_COLUMNS)
    out: list[FaceActUtterance] = []
    for n, row in enumerate(rows, start=2):
        try:
            donated = row.get("donated")
            out.append(
                FaceActUtterance(
                    conversation_id=row["conversation_id"],
                    turn=int(row["turn"]),
                    speaker=row["speaker"],
                    utterance=row["utterance"],
                    face_act=FaceAct.parse(row["face_act"]),
                    donated=None if donated in (None, "") else donated.strip() == "1",
                    previous=row.get("previous") or None,
                )
            )
        except ValueError as exc:
            raise InputError(str(exc), source=source, line=n) from None
        except (AttributeError, TypeError):  # a short row: csv fills missing fields with None
            raise InputError("row has fewer fields than the header", source=source, line=n) from None
    return out


def file_sha256(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()
