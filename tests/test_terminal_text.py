"""Transcript text on a terminal: nothing in it may drive the terminal or reorder what is shown."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from guardian.terminal_text import BIDI_CONTROLS, is_terminal_safe, terminal_safe

HOSTILE = "\x1b[2J\x1b]0;PWNED\x07 \u202eevil\u202c \r\x08\x9b31m \u2066x\u2069 \x7f"


def _obeyed(ch: str) -> bool:
    """A character a terminal acts on (or that reorders text) instead of just showing it."""
    return (unicodedata.category(ch) == "Cc" and ch not in "\t\n") or ord(ch) in BIDI_CONTROLS


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_any_text_comes_out_inert_and_the_same_length(text: str) -> None:
    safe = terminal_safe(text)
    assert len(safe) == len(text)  # quote spans computed on the original still fit
    assert not any(_obeyed(ch) for ch in safe)
    assert is_terminal_safe(safe)
    for before, after in zip(text, safe, strict=True):
        assert after == before or _obeyed(before)
    one_line = terminal_safe(text, one_line=True)
    assert "\n" not in one_line and len(one_line) == len(text)
    assert terminal_safe(safe) == safe


def test_the_reported_attack_is_shown_not_obeyed() -> None:
    safe = terminal_safe(HOSTILE)
    assert safe == "␛[2J␛]0;PWNED␇ \ufffdevil\ufffd ␍␈\ufffd31m \ufffdx\ufffd ␡"
    assert not is_terminal_safe(HOSTILE)
    assert terminal_safe("Ann: hi\n\tthere") == "Ann: hi\n\tthere"
