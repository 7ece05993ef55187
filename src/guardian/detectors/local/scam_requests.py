"""Requests a person should never grant a caller: the words a scam call turns on.

A one-time code, a password or PIN, card or account numbers, a social security
number, gift cards or crypto or a wire transfer, remote access to a computer,
secrecy ("don't tell anyone"), "don't hang up". The turn model's scam head
learned what scam calls sound like; these patterns say *which words* ask for the
thing, so the finding quotes the request itself, and a turn that both sounds
like a scam and asks for one is flagged at the eager sensitivity's threshold.
"""

from __future__ import annotations

import re

from guardian.grounding import Span, sentences

_ASK = r"(?:give|read|tell|send|share|confirm|verify|provide|need|want|buy|purchase|get|pay|transfer|wire|install|download|enter|type|go to|keep)"
_THING = (
    r"(?:(?:one[- ]time|verification|security|six[- ]digit|4[- ]digit|four[- ]digit|pin|access|confirmation)\s+code"
    r"|\bcode (?:we|that|I) (?:just )?sent|\bpassword|\bpin\b|social security|\bssn\b|card number|account number"
    r"|routing number|\bcvv\b|security code|expiration date|mother'?s maiden name|gift ?cards?|itunes|google play"
    r"|bitcoin|crypto|wire transfer|western union|moneygram|remote access|anydesk|teamviewer|screen ?shar\w*"
    r"|login details|bank (?:details|information|info))"
)
_PATTERNS = [
    re.compile(rf"\b{_ASK}\b[^.?!]{{0,60}}{_THING}", re.IGNORECASE),
    re.compile(rf"{_THING}[^.?!]{{0,40}}\b(?:please|right now|immediately|to verify|to confirm)\b", re.IGNORECASE),
    re.compile(r"\bdon'?t (?:hang up|tell (?:anyone|anybody|your)|talk to (?:anyone|your bank)|contact (?:anyone|your bank))",
               re.IGNORECASE),
    re.compile(r"\b(?:keep (?:this|it) (?:confidential|secret|between us)|confidential investigation)\b", re.IGNORECASE),
]


def request_sentences(text: str) -> list[Span]:
    """The sentences of `text` that ask for something a caller should never be given."""
    return [s for s in sentences(text) if any(p.search(s.text) for p in _PATTERNS)]
