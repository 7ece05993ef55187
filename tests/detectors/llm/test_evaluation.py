"""`guardian eval mentalmanip --detector llm|cascade` against a scripted local endpoint."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.corpora.datasets import mentalmanip_path
from guardian.eval.metrics import REPORT_KEYS

from .openai_stub import Reply, serve

ANSWER = json.dumps({"manipulative": True, "techniques": ["Accusation"], "vulnerabilities": [], "evidence": []})


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    rows = list(csv.DictReader(mentalmanip_path("con").read_text(encoding="utf-8").splitlines(keepends=True)))
    picked = [r for r in rows if r["Manipulative"] == "1"][:3] + [r for r in rows if r["Manipulative"] == "0"][:2]
    out = tmp_path / "five.csv"
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(picked)
    return out


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_eval_llm_reports_metrics_and_cost(
    small_csv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve([Reply(content=ANSWER)]) as stub:
        monkeypatch.setenv("GUARDIAN_LLM__BASE_URL", stub.base_url)
        monkeypatch.setenv("GUARDIAN_LLM__SAMPLES", "1")
        code = main(["eval", "mentalmanip", str(small_csv), "--detector", "llm", "--format", "json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(REPORT_KEYS) <= set(report)
    assert report["n"] == 5
    assert report["recall"] == 1.0 and report["false_positive_rate"] == 1.0  # the stub always says yes
    assert report["llm_calls"] == 5 and report["llm_tokens"] == 5 * 120 and report["llm_consulted"] == 5
    assert len(stub.requests) == 5


def test_eval_llm_without_endpoint_is_one_sentence(small_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "mentalmanip", str(small_csv), "--detector", "llm"]) == 2
    err = capsys.readouterr().err
    assert "llm.base_url" in err and "Traceback" not in err


def test_unknown_detector(small_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "mentalmanip", str(small_csv), "--detector", "magic"]) == 2
    assert "--detector" in capsys.readouterr().err
