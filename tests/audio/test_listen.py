"""`guardian listen` and `guardian devices` end to end (in-process CLI), and the listen TUI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.eval.speech import SynthDialogue

from .test_sources import _no_sound_card


def test_unreadable_recording_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "call.mp3"
    broken.write_bytes(b"\xff\xfb\x90garbage" * 300)
    assert main(["listen", "--audio", str(broken), "--headless", "--no-log", "-d", "keyphrases"]) == 2
    err = capsys.readouterr().err.strip()
    assert "call.mp3: cannot be decoded as audio" in err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_fast_needs_a_recording(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["listen", "--fast", "--headless", "--no-log"]) == 2
    assert "--fast replays a recording" in capsys.readouterr().err


@pytest.mark.skipif(not _no_sound_card(), reason="this machine has an input device")
def test_no_microphone_is_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["listen", "--headless", "--no-log", "-d", "keyphrases"]) == 2
    assert "no microphone found" in capsys.readouterr().err
    assert main(["devices"]) == 2
    assert "no microphone found" in capsys.readouterr().err


@pytest.mark.slow
def test_headless_listen_prints_watch_events(
    short_dialogue: SynthDialogue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dialogue = short_dialogue
    log = tmp_path / "session.jsonl"
    code = main(
        ["listen", "--audio", str(dialogue.stereo), "--channels", "--fast", "--headless", "-d", "keyphrases", "--log", str(log)]
    )
    assert code == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    turns = [e["turn"] for e in events if e["type"] == "turn"]
    assert len(turns) == len(dialogue.turns)
    for turn, truth in zip(turns, dialogue.turns, strict=True):
        assert turn["source"] == "audio"
        assert set(turn) >= {"speaker", "text", "start", "end"}
        assert turn["start"] == pytest.approx(truth.start, abs=0.4)
    assert [t["speaker"] for t in turns[:2]] == ["Speaker 1", "Speaker 2"]
    assessments = [e for e in events if e["type"] == "assessment"]
    assert [a["turn"] for a in assessments] == list(range(len(turns)))
    # "You are overreacting" is one of MentalManip's key phrases: found, and quoted verbatim
    findings = [e for e in events if e["type"] == "finding"]
    assert findings, "the key phrase spoken in turn 2 was not found"
    quote = findings[0]["finding"]["evidence"][0]
    assert quote["quote"] in turns[quote["turn"]]["text"]
    # the session log kept the same turns
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["turn"]["text"] for e in logged if e.get("type") == "turn"] == [t["text"] for t in turns]


@pytest.mark.slow
async def test_listen_tui_shows_turns_and_the_microphone_line(short_dialogue: SynthDialogue) -> None:
    dialogue = short_dialogue
    from guardian.audio.listen import ListenOptions, prepare_listen
    from guardian.tui.level_meter import LevelMeter
    from guardian.tui.listen_app import ListenApp

    session = prepare_listen(
        ListenOptions(audio=dialogue.stereo, channels=True, fast=True, detectors=("keyphrases",), no_log=True)
    )
    app = ListenApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        meter = app.query_one(LevelMeter)
        assert meter.state == "stopped"
        assert len(app.heard) == len(dialogue.turns)
        assert len(session.monitor.conversation(session.conversation_id).turns) == len(dialogue.turns)
        assert "dB" in str(meter.render())
