"""Is a turn written as a speech transcript writes it?

Why: every conversation the pair head learned from is written, with capitals and punctuation. Real
telephone transcripts are lower case, without punctuation, with fillers and repeated words, and on
them the written head flagged heated but fair arguments and long ordinary calls far more often
(`lab/turn_register_stress.py`: spoken 40-60 turn calls 10 % against 3.5 % written). A head trained on
both registers (`augment.spoken` copies) reads such turns; written turns keep the written head, which
finds more manipulation in them (docs/history.md, "Turn model").
"""

from __future__ import annotations

import re

#: Fewer words than this say too little about the register ("ok", "uh-huh"): read as written.
MIN_WORDS = 3
_WORD = re.compile(r"[^\W\d_]+")
_SENTENCE_PUNCTUATION = frozenset(".?!")


def spoken_register(text: str) -> bool:
    """No capital letter and no sentence punctuation over at least `MIN_WORDS` words: the form of an
    ASR or telephone-corpus transcript (and of some typed chat, which the two-register head reads as well)."""
    return (len(_WORD.findall(text)) >= MIN_WORDS and not any(c.isupper() for c in text)
            and not any(c in _SENTENCE_PUNCTUATION for c in text))
