from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.errors import InputError
from guardian.readers import InputFormat, detect_format, parse_transcript, read_transcript


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_lines_with_continuations() -> None:
    conv = parse_transcript("Person1: Where were you?\nI waited.\nPerson2: Out.\n\nPerson1: Again?")
    assert [(t.speaker, t.text) for t in conv.turns] == [
        ("Person1", "Where were you? I waited."),
        ("Person2", "Out."),
        ("Person1", "Again?"),
    ]
    assert [t.index for t in conv.turns] == [0, 1, 2]


def test_lines_error_names_line_and_expectation() -> None:
    with pytest.raises(InputError, match=r"chat.txt, line 1: expected 'Name: text'"):
        parse_transcript("just some words\nA: hi", source="chat.txt")


def test_urls_are_not_speakers() -> None:
    conv = parse_transcript("Ann: look at this\nhttps://example.org/x\nBob: ok")
    assert conv.turns[0].text == ["Ann", "look at this"][1] + " https://example.org/x"


def test_jsonl() -> None:
    text = "\n".join(
        json.dumps(o)
        for o in [{"speaker": "A", "text": "hi", "start": 0.5, "end": 1}, {"speaker": "B", "text": "yo"}]
    )
    conv = parse_transcript(text)
    assert conv.turns[0].start == 0.5 and conv.turns[0].end == 1.0 and conv.turns[1].start is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"speaker": "A", "text": "hi"}\n{"speaker": "B", "text": ', "line 2: not valid JSON"),
        ('{"speaker": "A"}', "line 1: missing or non-string 'text'"),
        ('{"text": "x"}', "line 1: missing or non-string 'speaker'"),
        ("[1, 2]", "line 1: expected a JSON object"),
        ('{"speaker": "A", "text": "x", "start": "soon"}', "'start' must be a number"),
    ],
)
def test_jsonl_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_transcript(text, input_format=InputFormat.JSONL)


def test_whatsapp_ios_and_android() -> None:
    ios = "[12/03/24, 21:15:02] Ann Lee: Where are you?\n[12/03/24, 21:16:10] Bob: busy\nreally busy"
    android = "12/03/2024, 21:15 - Ann: hi\n12/03/2024, 21:15 - Messages are end-to-end encrypted\n12/03/2024, 21:16 - Bob: go away"
    a = parse_transcript(ios)
    assert detect_format(ios) is InputFormat.WHATSAPP
    assert [(t.speaker, t.text) for t in a.turns] == [("Ann Lee", "Where are you?"), ("Bob", "busy\nreally busy")]
    b = parse_transcript(android)
    assert [(t.speaker, t.text) for t in b.turns] == [("Ann", "hi"), ("Bob", "go away")]


def test_whatsapp_garbage_first_line() -> None:
    with pytest.raises(InputError, match="line 1: expected a chat export line"):
        parse_transcript("hello\n[12/03/24, 21:15] Ann: hi", input_format="whatsapp")


def test_vtt_voice_tags_and_name_prefix(tmp_path: Path) -> None:
    vtt = (
        "WEBVTT\n\n00:00:01.000 --> 00:00:02.500\n<v Ann>You never listen.</v>\n\n"
        "00:00:02.600 --> 00:00:03.000\n<v Ann>Never.</v>\n\n"
        "00:01:03.000 --> 00:01:04.000\nBob: <i>I do.</i>\n"
    )
    conv = read_transcript(_write(tmp_path, "call.vtt", vtt))
    assert [(t.speaker, t.text, t.start, t.end) for t in conv.turns] == [
        ("Ann", "You never listen. Never.", 1.0, 3.0),
        ("Bob", "I do.", 63.0, 64.0),
    ]


def test_vtt_without_speaker_is_an_error() -> None:
    with pytest.raises(InputError, match="line 3: cue has no speaker"):
        parse_transcript("WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhello\n", input_format="vtt")


def test_srt(tmp_path: Path) -> None:
    srt = "1\n00:00:01,000 --> 00:00:02,000\nAnn: Hello\n\n2\n00:00:02,500 --> 00:00:04,000\n<v Bob>Hi there</v>\n"
    conv = read_transcript(_write(tmp_path, "x.srt", srt))
    assert [(t.speaker, t.text, t.start) for t in conv.turns] == [("Ann", "Hello", 1.0), ("Bob", "Hi there", 2.5)]
    assert detect_format(srt) is InputFormat.SRT


def test_srt_without_cues() -> None:
    with pytest.raises(InputError, match="no cues found"):
        parse_transcript("1\nhello\n", input_format="srt")


def test_undecodable_bytes_name_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "latin1.txt", "A: hi\nB: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.txt, line 2: byte 12 is not valid UTF-8"):
        read_transcript(path)


def test_utf16_with_bom_and_utf8_bom(tmp_path: Path) -> None:
    assert read_transcript(_write(tmp_path, "a.txt", "A: héllo".encode("utf-16"))).turns[0].text == "héllo"
    assert read_transcript(_write(tmp_path, "b.txt", b"\xef\xbb\xbfA: hi")).turns[0].speaker == "A"


@pytest.mark.parametrize("content", ["", "   \n\n", b"\n"])
def test_empty_file(tmp_path: Path, content: str | bytes) -> None:
    with pytest.raises(InputError, match="empty"):
        read_transcript(_write(tmp_path, "empty.txt", content))


def test_every_turn_empty() -> None:
    with pytest.raises(InputError, match="every turn is empty"):
        parse_transcript("A:\nB:   ")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_transcript(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="is a directory"):
        read_transcript(tmp_path)


def test_50_mb_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    with path.open("wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    with pytest.raises(InputError, match=r"file is 50 MB; transcripts are read up to 20 MB "):
        read_transcript(path)


def test_single_1_mb_line_is_a_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "line.txt", "A: " + "x" * (1024 * 1024))
    with pytest.raises(InputError, match="line 1: a turn of 1,048,576 characters is longer"):
        read_transcript(path)
    # and it is accepted when the user raises the limit
    assert len(read_transcript(path, max_turn_chars=2_000_000).turns[0].text) == 1024 * 1024


def test_stray_punctuation_before_first_turn_is_skipped() -> None:
    assert parse_transcript(": \nPerson1: hi").turns[0].text == "hi"


def test_bundled_example_reads() -> None:
    conv = read_transcript(Path(__file__).resolve().parent.parent / "examples" / "gaslighting.txt")
    assert conv.speakers == ("Maya", "Daniel")


def test_dev_zero_is_refused_at_the_limit_not_read_forever() -> None:
    """stat() says 0 bytes for a device: the reader must stop at the limit (it once filled memory)."""
    import resource
    import subprocess
    import sys

    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from guardian.errors import InputError\n"
        "from guardian.readers import read_transcript\n"
        "try:\n"
        "    read_transcript('/dev/zero', max_bytes=1 << 20)\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
    )
    assert resource.RLIMIT_AS  # the child caps its memory: the old reader died of MemoryError
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    assert "/dev/zero: file is larger than 1 MB; transcripts are read up to 1 MB" in done.stdout


def test_a_fifo_fed_past_the_limit_is_refused(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with fifo.open("wb") as f:
                for _ in range(64):
                    f.write(b"A: " + b"x" * 32_000 + b"\n")
        except BrokenPipeError:
            pass  # the reader stopped at the limit and closed its end

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with pytest.raises(InputError, match="file is larger than 1 MB"):
        read_transcript(fifo, max_bytes=1 << 20, max_turn_chars=10**6)
    writer.join(timeout=10)
    assert not writer.is_alive()


def test_a_fifo_without_a_writer_says_what_it_waits_for(tmp_path: Path) -> None:
    import os
    import threading

    from guardian.readers import read_limited

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    told = threading.Event()
    messages: list[str] = []

    def notify(message: str) -> None:
        messages.append(message)
        told.set()

    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(read_limited(fifo, max_bytes=100, notify=notify)), daemon=True)
    reader.start()
    assert told.wait(timeout=10), "no word while blocked on a FIFO without a writer"
    assert "waiting for a program to write to the named pipe" in messages[0] and str(fifo) in messages[0]
    with fifo.open("wb") as f:
        f.write(b"A: hi\n")
    reader.join(timeout=10)
    assert got == [b"A: hi\n"]


def test_size_messages_use_the_unit_of_the_setting(tmp_path: Path) -> None:
    from guardian.readers import megabytes

    assert megabytes(20 * 1024 * 1024) == "20 MB"  # was "21 MB" (10^6-byte megabytes)
    assert megabytes(1536 * 1024) == "1.5 MB"
