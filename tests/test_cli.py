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
    assert "**key_phrase**" in capsys.readouterr().out


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
