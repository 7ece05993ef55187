"""atheris fuzz target: transcript readers and grounding raise nothing but InputError.

Run bounded: `python tests/fuzz/fuzz_readers.py -max_total_time=60` (the test suite runs it for a few seconds).
"""

from __future__ import annotations

import sys

import atheris
import pydantic  # noqa: F401 - imported first so only guardian's own code is instrumented

with atheris.instrument_imports(include=["guardian"]):
    from guardian.conversation import Conversation
    from guardian.errors import InputError
    from guardian.grounding import clauses, ground
    from guardian.readers import InputFormat, decode, parse_transcript

FORMATS = list(InputFormat)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    fmt = FORMATS[fdp.ConsumeIntInRange(0, len(FORMATS) - 1)]
    raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4096))
    quote = fdp.ConsumeUnicodeNoSurrogates(64)
    try:
        text = decode(raw, source="fuzz")
        conv = parse_transcript(text, input_format=fmt, source="fuzz", max_turn_chars=2048)
    except InputError:
        return
    assert isinstance(conv, Conversation)
    for turn in conv.turns:
        for span in clauses(turn.text):
            assert turn.text[span.start : span.end] == span.text
    ev = ground(conv, quote)
    if ev is not None:
        assert conv.turn(ev.turn).text[ev.start : ev.end] == ev.quote


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
