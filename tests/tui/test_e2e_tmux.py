"""End to end: the real `guardian watch` in a real terminal (tmux), a highlighted quote on screen."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUOTE = "Know your place."  # a key phrase in examples/gaslighting.txt, turn 3
PLAIN = "Maya: That is not fair."  # a turn with nothing flagged
SGR = re.compile(r"\x1b\[([0-9;]*)m")

pytestmark = pytest.mark.e2e


def _style_at(line: str, text: str) -> tuple[frozenset[int], str | None]:
    """Attributes (bold=1, underline=4, …) and background in force where `text` starts.

    tmux writes incremental SGR sequences, so the state is replayed from the line's start.
    """
    attrs: set[int] = set()
    background: str | None = None
    pos = line.index(text)
    for match in SGR.finditer(line[:pos]):
        values = [int(p) if p.isdigit() else 0 for p in (match.group(1) or "0").split(";")]
        i = 0
        while i < len(values):
            v = values[i]
            if v in (38, 48):
                width = 3 if i + 1 < len(values) and values[i + 1] == 5 else 5
                if v == 48:
                    background = ";".join(map(str, values[i : i + width]))
                i += width
                continue
            if v == 0:
                attrs.clear()
                background = None
            elif v == 49:
                background = None
            elif 21 <= v <= 29:
                attrs.discard(v - 20 if v != 22 else 1)
            elif v < 10:
                attrs.add(v)
            i += 1
    return frozenset(attrs), background


def _watch_in_tmux(tmp_path: Path, name: str, *, wrap: str = "{}") -> list[str]:
    """Start `guardian watch examples/gaslighting.txt` (key phrases, log in `tmp_path`) in a private tmux
    server on an 80x24 terminal; the tmux command prefix for that server is returned.
    `wrap` is a shell template for the guardian command line (e.g. to record its pid first)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/setup.sh installs it)")
    guardian = Path(sys.executable).parent / "guardian"
    tmux = ["tmux", "-L", f"guardian-{name}-{os.getpid()}"]
    watch = (f"{guardian} watch examples/gaslighting.txt --instant --detectors keyphrases "
             f"--log {tmp_path / 'session.jsonl'}")
    command = (f"env GUARDIAN_DATA_DIR={tmp_path} GUARDIAN_CONFIG_DIR={tmp_path} TERM=xterm-256color "
               + wrap.format(watch))
    subprocess.run([*tmux, "new-session", "-d", "-s", "e2e", "-x", "80", "-y", "24", "-c", str(REPO), command],
                   check=True)
    return tmux


def test_guardian_watch_shows_a_highlighted_quote_in_a_real_terminal(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    tmux = _watch_in_tmux(tmp_path, "e2e")
    try:
        screen = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-e", "-t", "e2e"], capture_output=True,
                                    text=True, check=True).stdout
            plain = SGR.sub("", screen)
            if "replay finished" in plain and QUOTE in plain:
                break
            time.sleep(0.3)
        plain = SGR.sub("", screen)
        print(plain)  # the screenshot-equivalent, shown with -s
        assert "replay finished" in plain, plain
        assert "Flagged turns" in plain  # the panel of cards (none: key phrases alone flag no turn)
        rows = screen.splitlines()
        # The transcript (left pane) row with the quote, and a row of plain, unflagged talk.
        line = next(r for r in rows if 0 <= SGR.sub("", r).find(QUOTE) < 45)
        plain_line = next(r for r in rows if PLAIN in SGR.sub("", r))
        quote_attrs, quote_bg = _style_at(line, QUOTE)
        plain_attrs, plain_bg = _style_at(plain_line, "That is not fair.")
        # Highlighted: bold + underline on the highlight colour; ordinary talk is neither.
        assert 4 in quote_attrs and 4 not in plain_attrs
        assert quote_bg is not None and quote_bg != plain_bg
        subprocess.run([*tmux, "send-keys", "-t", "e2e", "q"], check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and subprocess.run([*tmux, "has-session", "-t", "e2e"],
                                                              capture_output=True).returncode == 0:
            time.sleep(0.2)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert '"type":"finding"' in log.read_text(encoding="utf-8")


def test_guardian_watch_exits_when_its_terminal_is_killed(tmp_path: Path) -> None:
    """A terminal can hang up without a SIGHUP reaching guardian (`make run` in a tmux pane that is
    killed: make keeps it; here the shell ignores it, as nohup does): guardian must notice and quit,
    not spin on end-of-file in the background (measured before the fix: a full core for 36 minutes)."""
    pid_file = tmp_path / "pid"
    tmux = _watch_in_tmux(tmp_path, "e2e-hup", wrap=f"sh -c 'trap \"\" HUP; echo $$ > {pid_file}; exec {{}}'")
    pid = 0
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "e2e"], capture_output=True, text=True).stdout
            if "replay finished" in screen:
                break
            time.sleep(0.3)
        assert "replay finished" in screen, screen
        pid = int(pid_file.read_text().strip())
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.2)
    alive = _running(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "guardian kept running after its terminal went away"


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child not yet reaped by its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
