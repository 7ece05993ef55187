"""`guardian report` on a results table: the flagged conversations, quotes highlighted, nothing injected."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.bulk.report import is_results_table, render_results
from guardian.bulk.rows import ConversationRow, QuotedTurn, Score, Screened, error_row
from guardian.bulk.sink import open_sink
from guardian.cli import main
from guardian.conversation import Evidence
from guardian.findings import Finding
from guardian.report import ReportFormat
from guardian.taxonomy import Technique

TEXT = "You're overreacting <script>alert(1)</script>, as usual."


def _flagged() -> ConversationRow:
    quote = "You're overreacting"
    finding = Finding(
        technique=Technique.DENIAL, score=0.9, detector="local",
        evidence=(Evidence(turn=1, quote=quote, start=0, end=len(quote)),),
    )
    return ConversationRow(
        id="chats/maya.txt", turns=3, decision=True, probability=0.9, first_flagged_turn=1, manipulator="Daniel",
        techniques=(Score(name="Denial", score=0.9),), findings=(finding,),
        quoted_turns=(QuotedTurn(turn=1, speaker="Daniel", text=TEXT),),
    )


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_report_shows_flagged_conversations_with_highlighted_quotes(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"results{suffix}"
    sink = open_sink(out, per_turn=False)
    sink.add(Screened(row=_flagged()))
    sink.add(Screened(row=ConversationRow(id="calm.txt", turns=2, probability=0.1)))
    sink.add(Screened(row=error_row("broken.txt", "broken.txt, line 1: not UTF-8")))
    sink.close()
    assert is_results_table(out)
    html = render_results(out, fmt=ReportFormat.HTML)
    assert "1 of 3 conversations flagged, 1 could not be screened" in html
    assert "chats/maya.txt" in html and "calm.txt" not in html
    assert "<mark>You&#39;re overreacting</mark>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "calm.txt" in render_results(out, fmt=ReportFormat.MARKDOWN, include_all=True)


def test_guardian_report_reads_a_results_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.jsonl"
    sink = open_sink(out, per_turn=False)
    sink.add(Screened(row=_flagged()))
    sink.close()
    assert main(["report", str(out), "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert "**You're overreacting**" in text.replace("\\'", "'")
