"""Which turns read as a speech transcript (`register.spoken_register`)."""

from __future__ import annotations

import pytest

from guardian.detectors.local.register import spoken_register


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("you know i really don't have so much more to say to you at at all", True),
        ("uh so what are you saying you're breaking up with me", True),
        ("I never said that.", False),  # capitals and punctuation: written
        ("i never said that.", False),  # a full stop: written (typed, not transcribed)
        ("Whatever you want", False),  # a capital: written
        ("uh-huh", False),  # too short to tell: the written head reads it
        ("ok see you", True),
        ("meet at 5 pm ok", True),
    ],
)
def test_spoken_register(text: str, spoken: bool) -> None:
    assert spoken_register(text) is spoken
