"""Reports: highlighted quotes, definitions, intents, escaping, the risk chart, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.conversation import Turn
from guardian.events import AssessmentReady, Event, FindingRaised, TurnAdded
from guardian.findings import Assessment, Finding, Intent
from guardian.monitor import Monitor
from guardian.report import ReportFormat, render, risk_svg
from guardian.session_log import SessionHeader, SessionLog
from guardian.taxonomy import FaceAct, Technique, Vulnerability
from tests.monitor_fakes import WordDetector

HOSTILE = 'You are stupid <script>alert("x")</script> & *proud*'


def _events() -> list[Event]:
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    events: list[Event] = []
    monitor.subscribe(events.append)
    monitor.add_turn_sync("chat", "Ann", HOSTILE)
    monitor.add_turn_sync("chat", "Ben", "Please stop.")
    monitor.close()
    # An intent detector's view of turn 1, as a teammate's detector would add it.
    intent = Intent(turn=1, speaker="Ben", face_act=FaceAct.SNEG_PLUS, score=0.7,
                    intention=FaceAct.SNEG_PLUS.general_intention, detector="intent-test")
    events.append(AssessmentReady("chat", Assessment(conversation_id="chat", turn=1, intents=(intent,)), risk=0.64))
    return events


def test_markdown_bolds_the_quote_and_gives_the_definition() -> None:
    text = render(_events(), fmt=ReportFormat.MARKDOWN)
    assert "**stupid**" in text
    assert Technique.SHAMING_OR_BELITTLEMENT.definition in text
    assert "intent: resists or refuses" in text
    assert "\\<script\\>" in text  # markdown special characters in the transcript are escaped


def test_html_escapes_the_transcript_and_marks_quotes() -> None:
    page = render(_events(), fmt=ReportFormat.HTML, title="<b>t</b>")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page  # markupsafe's entities
    assert "<mark>stupid</mark>" in page
    assert "&lt;b&gt;t&lt;/b&gt;" in page
    assert Technique.SHAMING_OR_BELITTLEMENT.definition in page
    assert "<polyline" in page and "<svg" in page


def test_json_lists_turns_findings_and_risk() -> None:
    data = json.loads(render(_events(), fmt=ReportFormat.JSON))
    conv = data["conversations"][0]
    assert [t["text"] for t in conv["turns"]] == [HOSTILE, "Please stop."]
    assert conv["findings"][0]["evidence"][0]["quote"] == "stupid"
    assert conv["findings"][0]["definition"] == Technique.SHAMING_OR_BELITTLEMENT.definition
    assert conv["turns"][1]["intents"][0]["face_act"] == "sneg+"
    assert conv["peak_risk"] == pytest.approx(0.8)


def test_overlapping_quotes_are_highlighted_once() -> None:
    turn = Turn(index=0, speaker="A", text="you are so stupid")
    f1 = Finding(pattern="key_phrase", score=0.5, detector="a", evidence=(
        _ev(turn, "so stupid"),))
    f2 = Finding(technique=Technique.ACCUSATION, score=0.5, detector="b", evidence=(_ev(turn, "stupid"),))
    events: list[Event] = [TurnAdded("c", turn), FindingRaised("c", 0, f1), FindingRaised("c", 0, f2)]
    assert "you are <mark>so stupid</mark>" in render(events, fmt=ReportFormat.HTML)


def _ev(turn: Turn, quote: str):  # type: ignore[no-untyped-def]
    from guardian.grounding import ground_in_turn

    evidence = ground_in_turn(turn, quote)
    assert evidence is not None
    return evidence


def test_risk_chart_scales_to_the_box() -> None:
    svg = risk_svg([0.0, 1.0], width=100, height=50)
    assert 'points="0.0,48.0 100.0,2.0"' in svg
    assert risk_svg([]) == ""


@pytest.mark.parametrize("fmt", ["markdown", "html", "json"])
def test_report_command_reads_a_session_log(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    log_path = tmp_path / "s.jsonl"
    log = SessionLog(log_path).open(SessionHeader("chat.txt", ("word-test",), 0.0))
    for event in _events():
        log.write(event)
    log.close()
    out = tmp_path / f"report.{fmt}"
    assert main(["report", str(log_path), "--format", fmt, "--output", str(out)]) == 0
    assert "stupid" in out.read_text(encoding="utf-8")
    assert main(["report", str(log_path), "--format", fmt]) == 0
    assert "stupid" in capsys.readouterr().out


def test_report_command_errors_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["report", str(tmp_path / "missing.jsonl"), "--format", "pdf"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not found" in err and "--format must be one of" in err


MARKDOWN_ATTACK = (
    "fine\n# Fake heading\n- fake bullet\n\n<img src=x onerror=alert(1)> "
    "[click](javascript:alert(1)) <javascript:alert(2)> ![i](http://x/y.png) `code` stupid"
)


def test_markdown_report_cannot_be_restructured_by_a_turn() -> None:
    """A newline in a turn once made a fake heading and bullet; HTML and links passed through."""
    from markdown_it import MarkdownIt

    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    events: list[Event] = []
    monitor.subscribe(events.append)
    monitor.add_turn_sync("chat", "Ann\n## Eve", MARKDOWN_ATTACK)
    monitor.close()
    text = render(events, fmt=ReportFormat.MARKDOWN)
    page = MarkdownIt("commonmark").render(text)
    assert "<img" not in page and "<script" not in page and "href=" not in page
    assert "<h1>Fake" not in page and "<h2>Eve" not in page and "<li>fake bullet" not in page
    assert page.count("<h1>") == 1 and page.count("<h2>") == 1  # the report's own title and conversation
    assert "# Fake heading" in page and "&lt;img src=x onerror=alert(1)&gt;" in page  # shown as text
    assert "<strong>stupid</strong>" in page  # the quote is still highlighted


def test_markdown_escapes_every_value_not_only_the_transcript() -> None:
    """The template's finalize escapes whatever it prints: title, detector names, error text."""
    from guardian.events import ErrorRaised

    events = [*_events(), ErrorRaised("chat", 1, "timeout", "took *too* long <b>", detector="word_test")]
    text = render(events, fmt=ReportFormat.MARKDOWN, title="[t](javascript:x)")
    assert text.startswith("# \\[t\\]\\(javascript:x\\)\n")
    assert "- turn 1: timeout in word\\_test: took \\*too\\* long \\<b\\>" in text
    assert text.endswith("\n\n") and "### Problems" in text


def test_the_templates_ship_with_the_package() -> None:
    from importlib.resources import files

    names = {p.name for p in files("guardian").joinpath("templates").iterdir()}
    assert {"report.md.j2", "report.html.j2", "report.css"} <= names


def test_a_report_never_overwrites_its_own_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "s.jsonl"
    with SessionLog(log).open(SessionHeader("chat.txt", ("word-test",), 0.0)) as writer:
        for event in _events():
            writer.write(event)
    before = log.read_bytes()
    assert main(["report", str(log), "-f", "html", "-o", str(log)]) == 2
    assert "is the session log being reported on" in capsys.readouterr().err
    assert log.read_bytes() == before
    link = tmp_path / "link.html"
    link.symlink_to(log)
    assert main(["report", str(log), "-f", "html", "-o", str(link)]) == 2
    assert log.read_bytes() == before
    assert main(["report", str(log), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["report", str(log), "-o", str(tmp_path / "missing" / "r.md")]) == 2
    assert "cannot write the report there" in capsys.readouterr().err
    assert main(["report", str(log), "-o", str(tmp_path / "r.md")]) == 0
    assert "stupid" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_a_report_refuses_an_existing_file_or_a_link_unless_forced(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "s.jsonl"
    with SessionLog(log).open(SessionHeader("chat.txt", ("word-test",), 0.0)) as writer:
        for event in _events():
            writer.write(event)
    transcript = tmp_path / "transcript.txt"
    transcript.write_text("Ann: keep me\n", encoding="utf-8")
    link = tmp_path / "report.md"
    link.symlink_to(transcript)
    for extra in ([], ["--force"]):  # a link is never written through, forced or not
        assert main(["report", str(log), "-o", str(link), *extra]) == 2
        assert "symbolic link" in capsys.readouterr().err
    assert transcript.read_text(encoding="utf-8") == "Ann: keep me\n" and link.is_symlink()
    assert main(["report", str(log), "-f", "md", "-o", str(transcript)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert transcript.read_text(encoding="utf-8") == "Ann: keep me\n"
    assert main(["report", str(log), "-f", "md", "-o", str(transcript), "--force"]) == 0
    assert "stupid" in transcript.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "s.jsonl", "transcript.txt"]  # no temp left


def test_the_short_format_names_are_accepted() -> None:
    assert ReportFormat("md") is ReportFormat.MARKDOWN and ReportFormat("HTML") is ReportFormat.HTML
    with pytest.raises(ValueError):
        ReportFormat("pdf")


def _flagged_events() -> list[Event]:
    """A session in which the local model's verdict flags turn 2 by the repetition rule."""
    from guardian.findings import Verdict

    turns = [Turn(index=i, speaker=s, text=t) for i, (s, t) in enumerate(
        [("Ann", "Where were you?"), ("Bob", "Nobody else would put up with you <b>."), ("Ann", "Stop."),
         ("Bob", "You are *so* stupid.")])]
    quote = _ev(turns[3], "You are *so* stupid.")
    finding = Finding(technique=Technique.SHAMING_OR_BELITTLEMENT, score=0.4, evidence=(quote,),
                      vulnerabilities=(Vulnerability.LOW_SELF_ESTEEM,), detector="local")
    verdict = Verdict(turn=3, score=0.7, threshold=0.9, sensitivity="medium", rule="repeated",
                      repeat_threshold=0.3, paired_with=1, paired_score=0.6)
    from guardian.cards import card_for

    flagged = Assessment(conversation_id="c", turn=3, probability=0.7, decision=True, threshold=0.9,
                         findings=(finding,), verdict=verdict)
    flagged = flagged.model_copy(update={"card": card_for(flagged, turns[3])})
    events: list[Event] = []
    for t, risk in zip(turns[:3], (0.05, 0.6, 0.48), strict=True):
        quiet = Verdict(turn=t.index, score=risk, threshold=0.9, sensitivity="medium")
        events += [TurnAdded("c", t), AssessmentReady("c", Assessment(conversation_id="c", turn=t.index,
                                                                       probability=risk, verdict=quiet), risk=risk)]
    events += [TurnAdded("c", turns[3]), FindingRaised("c", 3, finding), AssessmentReady("c", flagged, risk=0.7)]
    return events


def test_html_report_puts_the_summary_on_top_cards_inline_and_a_labelled_chart() -> None:
    page = render(_flagged_events(), fmt=ReportFormat.HTML)
    assert page.index("<h3>Summary</h3>") < page.index("<h3>Risk over time</h3>") < page.index("<h3>Transcript</h3>")
    assert '<td>Bob</td><td>2</td><td><a href="#turn-3">3</a></td><td>3</td><td>Shaming or Belittlement</td>' in page
    # the card sits right under its turn, quoting it with its span
    turn3 = page.index('id="turn-3"')
    assert turn3 < page.index('<div class="card">') < page.index("<h3>All findings</h3>")
    assert "(turn 3, chars 0&ndash;20)" in page and "as Bob&#39;s turn 1 did (.60)" in page
    assert "&lt;b&gt;" in page and "<b>." not in page
    # the chart: axis names, ticks, both thresholds drawn and named, the flagged turn marked
    assert ">turn</text>" in page and ">risk</text>" in page and ">1.00</text>" in page
    assert "medium threshold .90</text>" in page and "repeat threshold .30</text>" in page
    assert "<title>turn 3 flagged</title>" in page
    assert "@media print" in page
    assert "What you can do" in page


def test_markdown_and_json_reports_carry_the_summary_and_cards() -> None:
    text = render(_flagged_events(), fmt=ReportFormat.MARKDOWN)
    assert "- Bob: 1 flagged turn \\(3\\) since turn 3: Shaming or Belittlement" in text
    assert '     - quote: "You are \\*so\\* stupid." (turn 3, chars 0–20)' in text
    assert "\\<b\\>" in text
    data = json.loads(render(_flagged_events(), fmt=ReportFormat.JSON))
    assert data["schema_version"] == 2
    conv = data["conversations"][0]
    assert [c["turn"] for c in conv["cards"]] == [3]
    assert conv["summary"]["speakers"][1]["flagged_turns"] == [3]
