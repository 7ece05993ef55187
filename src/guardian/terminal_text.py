"""Text from a transcript, made safe to show on a terminal.

A transcript is written by someone else: a speaker name of `ESC [2J ESC ]0;PWNED BEL`
clears the screen and retitles the window when printed raw, and a right-to-left
override (U+202E) makes a quote read differently from what was said. Everything that
puts transcript (or file-name) text on a terminal — `analyze`'s text and markdown,
the TUI, error messages — passes it through `terminal_safe`; JSON output keeps the
exact text (JSON escapes control characters itself).

Each unsafe character becomes exactly one visible character (control pictures such
as ␛ for C0 controls, � for the rest), so quote spans computed on the original text
still highlight the same characters.
"""

from __future__ import annotations

#: Explicit bidirectional formatting characters (Unicode TR9): embeddings, overrides,
#: isolates, and the marks that can reorder what follows them.
BIDI_CONTROLS = frozenset(
    (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)


def _shown_as(code: int) -> str:
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ … ␟ (U+2400 block: one picture per C0 control)
    if code == 0x7F:
        return "\u2421"  # ␡
    return "\ufffd"


_UNSAFE = (*(c for c in range(0x20) if c not in (0x09, 0x0A)), 0x7F, *range(0x80, 0xA0), *BIDI_CONTROLS)
_MULTILINE = {code: _shown_as(code) for code in _UNSAFE}
_ONE_LINE = {**_MULTILINE, 0x0A: _shown_as(0x0A)}


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """`text` with every terminal control character and bidi override made visible and inert.

    Tabs stay; newlines stay unless `one_line` (an error message or a status line, where a
    newline could fake a line of guardian's own output). The result has the same length.
    """
    return text.translate(_ONE_LINE if one_line else _MULTILINE)


def is_terminal_safe(text: str, *, one_line: bool = False) -> bool:
    """True when printing `text` cannot move the cursor, send a terminal command or reorder text."""
    table = _ONE_LINE if one_line else _MULTILINE
    return not any(ord(ch) in table for ch in text)
