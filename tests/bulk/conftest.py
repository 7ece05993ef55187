"""A few dozen real conversations (MentalManip dialogues and phone calls), and their rows screened once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.bulk.inputs import Item
from guardian.bulk.rows import ConversationRow
from guardian.bulk.screen import ScreenOptions
from guardian.conversation import Conversation, Turn

REPO = Path(__file__).resolve().parents[2]


def _clean(text: str) -> str:
    """One line, single spaces: the same turn text in every input form (a transcript line, JSON, Parquet)."""
    return " ".join(text.split())


def sample_conversations(n_dialogues: int = 20, n_calls: int = 4) -> list[Conversation]:
    from guardian.corpora.datasets import load_mentalmanip

    out = []
    for d in load_mentalmanip()[200 : 200 + n_dialogues]:
        turns = tuple(Turn(index=i, speaker=t.speaker, text=_clean(t.text)) for i, t in enumerate(d.conversation.turns))
        out.append(Conversation(id=f"mm/{d.conversation.id}.txt", turns=turns))
    with (REPO / "data" / "conversations" / "calls.jsonl").open(encoding="utf-8") as fh:
        scams = [row for row in map(json.loads, fh) if row["label"] == "scam"][:n_calls]
    for row in scams:
        turns = tuple(Turn(index=i, speaker=t["speaker"], text=_clean(t["text"])) for i, t in enumerate(row["turns"]))
        out.append(Conversation(id=f"calls/{row['id']}.jsonl", turns=turns))
    return out


def write_jsonl(path: Path, conversations: list[Conversation], *, extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [
        json.dumps({"id": c.id, "turns": [{"speaker": t.speaker, "text": t.text} for t in c.turns]})
        for c in conversations
    ]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")
    return path


def write_directory(root: Path, conversations: list[Conversation]) -> Path:
    """Each conversation as a transcript file named by its id: `Name: text` lines or one JSON turn a line."""
    for c in conversations:
        path = root / c.id
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps({"speaker": t.speaker, "text": t.text}) + "\n" for t in c.turns), encoding="utf-8")
        else:
            path.write_text("".join(f"{t.speaker}: {t.text}\n" for t in c.turns), encoding="utf-8")
    return root


def write_parquet(path: Path, conversations: list[Conversation]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(
        [{"id": c.id, "turns": [{"speaker": t.speaker, "text": t.text} for t in c.turns]} for c in conversations]
    )
    pq.write_table(table, path, row_group_size=7)  # several row groups: batches are read across them
    return path


@pytest.fixture(scope="session")
def conversations() -> list[Conversation]:
    return sample_conversations()


@pytest.fixture(scope="session")
def default_options() -> ScreenOptions:
    """What `guardian analyze ARCHIVE --out` uses with no configuration: the installed local defaults
    less the registry's `BULK_SKIPS` (the intent model), window 10.

    Spelled out, not read from the settings: a session fixture runs before the per-test isolation
    of the user's configuration. `test_default_options_are_bulk_defaults` pins the equality.
    """
    from guardian.config import MonitorSettings
    from guardian.detectors import registry

    installed = set(registry.names())
    return ScreenOptions(
        detectors=tuple(n for n in registry.DEFAULT_ORDER if n in installed and n not in registry.BULK_SKIPS),
        window=MonitorSettings().window,
        per_turn=True,
    )


@pytest.fixture(scope="session")
def reference_rows(conversations: list[Conversation], default_options: ScreenOptions) -> dict[str, ConversationRow]:
    """Every sample conversation screened once in this process: what every engine and input must reproduce."""
    from guardian.bulk.screen import Screener

    screener = Screener(default_options)
    return {c.id: screener.screen(Item(c.id, conversation=c)).row for c in conversations}


@pytest.fixture(scope="session")
def fresh_reference_rows(
    conversations: list[Conversation], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ConversationRow]:
    """The sample screened by `guardian analyze --out` in a fresh process: what other processes must reproduce.

    Not `reference_rows`: after the rest of the suite has run in this process (torch's thread
    count, encoder state), its floats can differ from a fresh process's in the last bits, and
    rows are compared exactly.
    """
    import subprocess
    import sys

    from guardian.bulk.sink import read_rows

    folder = tmp_path_factory.mktemp("fresh_reference")
    source = write_jsonl(folder / "convs.jsonl", conversations)
    out = folder / "reference.jsonl"
    guardian = Path(sys.executable).with_name("guardian")
    proc = subprocess.run(
        [str(guardian), "analyze", str(source), "--out", str(out), "--per-turn", "--jobs", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return {r.id: r for r in read_rows(out)}
