"""The per-speaker summary is built from cards only, so it does not drift (issue 46)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from rich.console import Console

from guardian.analyze import AnalyzeReport, assess_turns, render_markdown, render_text, summary_of
from guardian.conversation import Conversation
from tests.monitor_fakes import WordDetector
from tests.test_cards import CHAT

SCHEMA = Path(__file__).resolve().parents[1] / "src" / "guardian" / "schema" / "analyze.schema.json"


def test_the_summary_names_the_speaker_his_tactics_and_since_when() -> None:
    summary = summary_of(CHAT, assess_turns(CHAT, [WordDetector()], window=10))
    [daniel] = summary.flagged
    assert (daniel.speaker, daniel.flagged_turns, daniel.since) == ("Daniel", (1, 3), 1)
    assert daniel.tactics == ("Shaming or Belittlement",)
    assert summary.line().startswith("Daniel: 2 flagged turns (1, 3) since turn 1: Shaming or Belittlement. Risk now")
    maya = next(s for s in summary.speakers if s.speaker == "Maya")
    assert maya.flagged_turns == () and maya.turns == 3


def test_harmless_talk_does_not_raise_the_count() -> None:
    longer = Conversation.from_pairs(
        [(t.speaker, t.text) for t in CHAT.turns] + [("Maya", "ok"), ("Daniel", "fine")] * 10, id="c")
    short = summary_of(CHAT, assess_turns(CHAT, [WordDetector()], window=10))
    long = summary_of(longer, assess_turns(longer, [WordDetector()], window=10))
    assert [s.flagged_turns for s in long.speakers] == [s.flagged_turns for s in short.speakers]
    assert long.risk < short.risk  # the risk decays once the put-downs are past


def test_the_json_document_is_versioned_and_carries_summary_and_steps() -> None:
    assessments = assess_turns(CHAT, [WordDetector()], window=10)
    doc = AnalyzeReport(
        guardian_version="0", conversation=CHAT, detectors=("word-test",), assessments=tuple(assessments),
        summary=summary_of(CHAT, assessments), next_steps={"manipulation": ("Keep a record.",)},
    ).model_dump(mode="json")
    jsonschema.validate(doc, json.loads(SCHEMA.read_text(encoding="utf-8")))
    assert doc["schema_version"] == 2
    assert [c["card"]["turn"] for c in doc["assessments"] if c["card"]] == [1, 3]
    assert doc["summary"]["speakers"][1]["flagged_turns"] == [1, 3]
    doc["schema_version"] = 1
    try:
        jsonschema.validate(doc, json.loads(SCHEMA.read_text(encoding="utf-8")))
    except jsonschema.ValidationError:
        pass
    else:  # pragma: no cover - the failure this test exists for
        raise AssertionError("a version-1 document validated against the version-2 schema")


def test_text_and_markdown_end_with_the_summary_and_show_one_card_per_flagged_turn() -> None:
    assessments = assess_turns(CHAT, [WordDetector()], window=10)
    console = Console(record=True, width=120)
    render_text(console, CHAT, assessments)
    out = console.export_text()
    assert out.count("⚑ turn") == 2 and "⚑ turn 1 · Daniel" in out and "⚑ turn 3 · Daniel" in out
    assert "Daniel: 2 flagged turns (1, 3) since turn 1" in out
    assert "Keep your own record" in out  # what to do, with a flagged assessment
    md = render_markdown(CHAT, assessments)
    assert md.count("- ⚑ flagged: Daniel") == 2
    assert "**Summary:** Daniel: 2 flagged turns \\(1, 3\\)" in md
