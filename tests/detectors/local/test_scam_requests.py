"""The request patterns behind the scam-request quote."""

from __future__ import annotations

import pytest

from guardian.detectors.local.scam_requests import request_sentences


@pytest.mark.parametrize("text", [
    "Please read me the six-digit code we just sent to your phone.",
    "You need to buy three Google Play gift cards right now.",
    "Can you confirm your social security number for me?",
    "I'll need you to install AnyDesk so I can fix it.",
    "Don't hang up, this is urgent.",
    "And don't tell anyone at the branch about this call.",
])
def test_requests_are_found_as_whole_sentences(text: str) -> None:
    found = request_sentences("Hello there. " + text)
    assert [s.text for s in found] == [text]


@pytest.mark.parametrize("text", [
    "Your appointment is on Thursday at 2 PM.",
    "I forgot my password again, so annoying.",
    "The package will arrive tomorrow before noon.",
])
def test_ordinary_sentences_are_not_requests(text: str) -> None:
    assert request_sentences(text) == []
