"""`guardian report results.parquet`: the flagged conversations of a bulk run, as a shareable report.

The rows are turned back into the events a watched session logs (turns, assessments,
findings), so the session report (`guardian.report`) renders them: the same HTML with
the quoted words highlighted, the same escaping of every transcript character. Without
`--per-turn` rows a conversation shows only the turns its findings quote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from guardian.bulk.rows import ConversationRow, TurnRow
from guardian.bulk.sink import read_rows, read_turn_rows
from guardian.conversation import Turn
from guardian.errors import InputError
from guardian.events import AssessmentReady, Event, FindingRaised, TurnAdded
from guardian.findings import Assessment
from guardian.report import ReportFormat, render


def is_results_table(path: Path) -> bool:
    """A results folder/.parquet, or a JSONL whose first row is a conversation row (not a session log)."""
    if path.is_dir() or path.suffix.lower() == ".parquet":
        return True
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    return isinstance(row, dict) and {"id", "status", "findings"} <= row.keys()
    except (OSError, ValueError, RecursionError):
        return False
    return False


def _events(row: ConversationRow, turns: list[TurnRow]) -> Iterator[Event]:
    cid = row.id
    if turns:
        for t in turns:
            yield TurnAdded(cid, Turn(index=t.turn, speaker=t.speaker, text=t.text))
            assessment = Assessment(conversation_id=cid, turn=t.turn, probability=t.probability, decision=t.decision)
            yield AssessmentReady(cid, assessment, risk=t.probability or 0.0)
    else:
        for q in row.quoted_turns:
            yield TurnAdded(cid, Turn(index=q.turn, speaker=q.speaker, text=q.text))
        if row.probability is not None:  # the peak the row kept: its most suspicious turn's probability
            turn = row.first_flagged_turn if row.first_flagged_turn is not None else max(row.turns - 1, 0)
            peak = Assessment(conversation_id=cid, turn=turn, probability=row.probability, decision=row.decision)
            yield AssessmentReady(cid, peak, risk=row.probability)
    for finding in row.findings:
        raised = max((e.turn for e in finding.evidence), default=row.first_flagged_turn or 0)
        yield FindingRaised(cid, raised, finding)


def render_results(path: Path, *, fmt: ReportFormat, include_all: bool = False) -> str:
    """The report of a results table: its flagged conversations (every one with `include_all`)."""
    if not path.exists():
        raise InputError("not found; give the --out of a bulk `guardian analyze`", source=str(path))
    rows = list(read_rows(path))
    shown = [r for r in rows if include_all or r.decision]
    wanted = {r.id for r in shown}
    turns: dict[str, list[TurnRow]] = {}
    for t in read_turn_rows(path):
        if t.conversation_id in wanted:
            turns.setdefault(t.conversation_id, []).append(t)
    flagged = sum(r.decision for r in rows)
    errors = sum(r.status == "error" for r in rows)
    title = (
        f"guardian report: {path.name}: {flagged} of {len(rows)} conversations flagged"
        + (f", {errors} could not be screened" if errors else "")
    )
    events = [e for r in shown for e in _events(r, turns.get(r.id, []))]
    return render(events, fmt=fmt, title=title)
