"""The bundled example conversations: readable, their expected quotes verbatim, and found by the monitor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.detectors import registry
from guardian.events import Event, FindingRaised
from guardian.grounding import ground_in_turn
from guardian.monitor import Monitor
from guardian.readers import read_transcript
from guardian.taxonomy import Technique, Vulnerability

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXPECTED = sorted(EXAMPLES.glob("*.expected.json"))


def test_the_make_run_example_exists() -> None:
    assert (EXAMPLES / "gaslighting.txt").is_file()
    assert len(EXPECTED) >= 3


@pytest.mark.parametrize("expected_file", EXPECTED, ids=lambda p: p.name)
def test_expected_findings_are_verbatim_and_labelled(expected_file: Path) -> None:
    expected = json.loads(expected_file.read_text(encoding="utf-8"))
    conversation = read_transcript(EXAMPLES / expected["transcript"])
    assert expected["manipulator"] in conversation.speakers
    for label in expected["techniques"]:
        Technique.parse(label)
    for label in expected["vulnerabilities"]:
        Vulnerability.parse(label)
    for item in [*expected["findings"], *expected["not_findings"]]:
        turn = conversation.turn(item["turn"])
        assert ground_in_turn(turn, item["quote"]) is not None, item
    for item in expected["findings"]:
        assert conversation.turn(item["turn"]).speaker == expected["manipulator"]
        Technique.parse(item["technique"])


@pytest.mark.parametrize("expected_file", EXPECTED, ids=lambda p: p.name)
def test_the_key_phrase_detector_raises_the_expected_quotes(expected_file: Path) -> None:
    if "keyphrases" not in registry.names():
        pytest.skip("the keyphrases detector is not installed")
    expected = json.loads(expected_file.read_text(encoding="utf-8"))
    conversation = read_transcript(EXAMPLES / expected["transcript"])
    monitor = Monitor([registry.create("keyphrases")], window=10, timeout_s=30)
    events: list[Event] = []
    monitor.subscribe(events.append)
    for turn in conversation.turns:
        monitor.add_turn_sync(conversation.id, turn.speaker, turn.text)
    monitor.close()
    raised = [(e.finding.evidence[0].turn, e.finding.evidence[0].start, e.finding.evidence[0].end)
              for e in events if isinstance(e, FindingRaised) and e.finding.evidence]

    def overlaps(item: dict) -> bool:
        ev = ground_in_turn(conversation.turn(item["turn"]), item["quote"])
        assert ev is not None
        return any(t == ev.turn and s < ev.end and ev.start < e for t, s, e in raised)

    for item in expected["findings"]:
        if "keyphrases" in item.get("detectors", []):
            assert overlaps(item), f"keyphrases missed {item['quote']!r}"
    for item in expected["not_findings"]:
        assert not overlaps(item), f"false alarm on {item['quote']!r}"
