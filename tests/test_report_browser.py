"""The HTML report renders in a real browser (headless Chromium), chart and cards included.

Slow (a browser start); skipped where no Chromium is installed (Debian: apt-get install chromium).
`make report-check` does the same on the bundled example with the real detectors.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from guardian.report import ReportFormat, render
from tests.test_report import _flagged_events

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed")
def test_the_html_report_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(_flagged_events(), fmt=ReportFormat.HTML), encoding="utf-8")
    shot = tmp_path / "report.png"
    assert BROWSER is not None
    base = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*base, "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    assert 'class="card"' in dom and ">risk</text>" in dom and "medium threshold .90" in dom
