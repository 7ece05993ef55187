from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from guardian import __version__
from guardian.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "gaslighting.txt"
SCHEMA_DIR = REPO / "src" / "guardian" / "schema"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"guardian {__version__}"


def test_analyze_text_quotes_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(EXAMPLE), "--detectors", "keyphrases"]) == 0
    out = capsys.readouterr().out
    assert "[1] Daniel: I never said that." in out
    assert "key_phrase" in out
    assert "“You're overreacting, as usual.” (turn 1)" in out


def test_analyze_json_validates_against_the_documented_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(EXAMPLE), "--format", "json", "-d", "keyphrases"]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads((SCHEMA_DIR / "analyze.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert len(doc["assessments"]) == len(doc["conversation"]["turns"]) == 7
    quotes = [e["quote"] for a in doc["assessments"] for f in a["findings"] for e in f["evidence"]]
    turns = {t["index"]: t["text"] for t in doc["conversation"]["turns"]}
    for a in doc["assessments"]:
        for f in a["findings"]:
            for e in f["evidence"]:
                assert turns[e["turn"]][e["start"] : e["end"]] == e["quote"]
    assert quotes


def test_schema_files_are_current() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_schema
    finally:
        sys.path.pop(0)
    for name in gen_schema.SCHEMAS:
        assert (SCHEMA_DIR / f"{name}.schema.json").read_text() == gen_schema.render(name), (
            "run scripts/gen_schema.py"
        )


def test_analyze_jsonl_and_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(EXAMPLE), "-f", "jsonl", "-d", "keyphrases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7 and all(json.loads(ln)["turn"] == i for i, ln in enumerate(lines))
    assert main(["analyze", str(EXAMPLE), "-f", "markdown", "-d", "keyphrases"]) == 0
    assert "**key\\_phrase**" in capsys.readouterr().out  # detector labels are escaped like the transcript


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"A: hi\nB: You always do this.\n")))
    assert main(["analyze", "-", "-f", "jsonl", "-d", "keyphrases"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "missing.txt"], "missing.txt: file not found"),
        (["analyze", str(EXAMPLE), "-f", "yaml"], "--format must be one of"),
        (["analyze", str(EXAMPLE), "-d", "nope"], "no detector named 'nope'"),
    ],
)
def test_input_errors_are_one_sentence_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_usage_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze"]) == 2
    assert main(["no-such-command"]) == 2


def test_bad_config_is_one_line_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from guardian.config import settings

    cfg = tmp_path / "config.toml"
    cfg.write_text("[monitor]\nwindoww = 3\n")
    monkeypatch.setenv("GUARDIAN_CONFIG_FILE", str(cfg))
    settings.cache_clear()
    assert main(["analyze", str(EXAMPLE)]) == 2
    assert "unknown configuration key 'monitor.windoww'" in capsys.readouterr().err


def test_an_unknown_encoder_precision_is_one_sentence_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21 item 10: GUARDIAN_ENCODER_PRECISION=float8 was one detector error per turn, exit 0
    (and nothing at all with detectors that use no encoder)."""
    monkeypatch.setenv("GUARDIAN_ENCODER_PRECISION", "float8")
    assert main(["analyze", str(EXAMPLE), "--detectors", "keyphrases"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "error: GUARDIAN_ENCODER_PRECISION='float8' is not a precision; use float32, bfloat16 or int8"
    ]


def test_internal_error_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import guardian.analyze

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(guardian.analyze, "run_analyze", boom)
    assert main(["analyze", str(EXAMPLE)]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: bug" in err and "Traceback" not in err


@pytest.mark.e2e
def test_console_script_end_to_end(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "guardian"
    proc = subprocess.run([str(exe), "analyze", str(EXAMPLE), "-f", "jsonl", "-d", "keyphrases"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 7
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\xfa garbage")
    proc = subprocess.run([str(exe), "analyze", str(bad)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr


HOSTILE_TURNS = (
    '{"speaker": "\\u001b[2J\\u001b]0;PWNED\\u0007", "text": "You\'re overreacting, as usual. \\u202eyou said\\u202c"}\n'
    '{"speaker": "Ben", "text": "ok\\r\\u001b[1A\\u009b2J"}\n'
)


def _obeyed(text: str) -> list[str]:
    from guardian.terminal_text import is_terminal_safe

    return [ch for ch in text if not is_terminal_safe(ch)]


def test_transcript_control_characters_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = tmp_path / "a.jsonl"
    chat.write_text(HOSTILE_TURNS, encoding="utf-8")
    for fmt in ("text", "markdown"):
        assert main(["analyze", str(chat), "-d", "keyphrases", "-f", fmt]) == 0
        out = capsys.readouterr().out
        assert _obeyed(out) == [], fmt
        assert "overreacting" in out and "PWNED" in out  # shown, as inert text
    assert main(["analyze", str(chat), "-d", "keyphrases", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # JSON keeps the exact text
    assert doc["conversation"]["turns"][0]["speaker"] == "\x1b[2J\x1b]0;PWNED\x07"
    assert doc["conversation"]["turns"][1]["text"] == "ok\r\x1b[1A\x9b2J"


def test_error_messages_show_control_characters_and_markup_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = str(tmp_path / "x\x1b]0;PWNED\x07\u202e[/]txt.jsonl")
    assert main(["analyze", name]) == 2
    err = capsys.readouterr().err
    assert "file not found" in err and "[/]" in err  # a markup tag in a name once crashed the handler
    assert _obeyed(err.rstrip("\n")) == []
    bad = tmp_path / "bad.txt"
    bad.write_text("no speaker \x1b[2J here\n", encoding="utf-8")
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "expected 'Name: text'" in err and _obeyed(err.rstrip("\n")) == []


def test_analyze_markdown_escapes_html_links_and_line_breaks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from markdown_it import MarkdownIt

    chat = tmp_path / "x.jsonl"
    turn = {"speaker": "Eve", "text": "<script>alert(1)</script>\n# Heading\n- bullet [x](javascript:alert(1)) "
            "<img src=x onerror=alert(2)> You're overreacting, as usual."}
    chat.write_text(json.dumps(turn) + "\n", encoding="utf-8")
    assert main(["analyze", str(chat), "-f", "markdown", "-d", "keyphrases"]) == 0
    page = MarkdownIt("commonmark").render(capsys.readouterr().out)
    assert "<script" not in page and "<img" not in page and "href=" not in page
    assert page.count("<h1>") == 1 and "<li>bullet" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.e2e
def test_a_full_disk_and_a_reader_that_leaves(tmp_path: Path) -> None:
    """`> /dev/full` printed 16 tracebacks and exited 0; `| head -1` exited 1: now one sentence
    and exit 2, and a quiet exit 0."""
    exe = str(Path(sys.executable).parent / "guardian")
    runs = (
        [exe, "analyze", str(EXAMPLE), "-d", "keyphrases"],
        [exe, "analyze", str(EXAMPLE), "-d", "keyphrases", "-f", "jsonl"],
        [exe, "watch", str(EXAMPLE), "--headless", "--instant", "-d", "keyphrases", "--no-log"],
    )
    for args in runs:
        with open("/dev/full", "w") as full:
            proc = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1
    long_chat = tmp_path / "long.txt"
    long_chat.write_text("".join(f"{'AB'[i % 2]}: line {i} of a long chat\n" for i in range(3000)), encoding="utf-8")
    for args in ([exe, "analyze", str(long_chat), "-d", "keyphrases"],
                 [exe, "analyze", str(long_chat), "-d", "keyphrases", "-f", "jsonl"],
                 [exe, "watch", str(long_chat), "--headless", "--instant", "-d", "keyphrases", "--no-log"]):
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline()
        proc.stdout.close()  # the reader leaves, like `| head -1`
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and err == b"", (args, err)


def test_json_nested_too_deeply_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n", encoding="utf-8")
    assert main(["analyze", str(deep)]) == 2
    err = capsys.readouterr().err
    assert "line 1: JSON nested too deeply" in err and "internal error" not in err
