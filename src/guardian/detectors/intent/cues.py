"""Guideline cues of an utterance: sentence mood and the markers the everyday labelling guidelines name.

Why: the everyday face acts are largely marked in the surface form the guidelines describe
(data/README.md): a question or an imperative imposes (hneg-), "I'll ..." commits (sneg-), "sorry"
apologises (spos-), "thanks" supports (hpos+), "no" / "I can't" refuses (sneg+). Sentence vectors
blur these small words; 0/1 flags for them, for the turn and for the turn before it, give the
everyday head what the labellers read (lab/intent_everyday_r3_cv.py: MiniLM head .49 -> .57 accuracy
in conversation-grouped CV). Hand-written patterns, not learnt from the labels.
"""

from __future__ import annotations

import re

import numpy as np

CUE_PATTERNS: dict[str, str] = {
    "question": r"\?",
    "wh_start": r"^(what|when|where|which|who|whom|why|how)\b",
    "aux_start": r"^(can|could|would|will|do|does|did|is|are|was|were|have|has|may|shall|should)\b",
    "you_aux": r"\b(can|could|would|will) you\b",
    "please": r"\bplease\b",
    "imperative": r"^(please |just |now |so |ok(ay)?,? )?(send|tell|give|call|let|come|go|take|make|stop|look|wait|"
                  r"listen|check|get|bring|put|don't|do not|try|keep|leave|show|help|find|book|pay|sign|buy|"
                  r"read|answer|remember|hurry|calm|shut|hand|transfer|confirm|provide|verify|move|sit|be)\b",
    "want_you": r"\b(i want you|i need you|you (need|have|must|should|better|ought)|you'd better|you gotta)\b",
    "suggest": r"\b(how about|what about|why don't (you|we)|let's|shall we|you should)\b",
    "threat": r"\b(if you don't|or else|otherwise|you will lose|we will have to|will be (arrested|suspended|frozen))\b",
    "commit": r"\b(i'll|i will|i can|i'm going to|let me|we'll|we can|i promise|sure|of course|no problem|"
              r"certainly|absolutely|right away)\b",
    "comply_start": r"^(ok(ay)?|sure|yes|yeah|alright|all right|fine|of course|certainly)\b",
    "personal_data": r"\b(my (name|number|address|date of birth|account|card|social|email|phone)|it's \d|\d{3,})\b",
    "apology": r"\b(sorry|apologi[sz]e|my fault|my bad|excuse me|forgive me|pardon)\b",
    "thanks": r"\b(thank|thanks|appreciate|grateful)\b",
    "refuse": r"\b(no|not|can't|cannot|won't|don't want|rather not|no thanks|busy|unable|refuse|never mind)\b",
    "no_start": r"^(no|nope|nah|not really|i don't think so|i can't|i won't)\b",
    "praise": r"\b(great|good|wonderful|nice|love|amazing|perfect|beautiful|excellent|awesome|brilliant|"
              r"well done|congratulations|smart|kind)\b",
    "negative": r"\b(ridiculous|stupid|crazy|liar|lying|lie|idiot|pathetic|selfish|rude|terrible|awful|"
                r"useless|incompetent|scam|fraud|ashamed|shame|wrong with you|fault|blame|disgusting|hate)\b",
    "you": r"\b(you|your|you're|yourself)\b",
    "i_self": r"\b(i|i'm|i've|my|me|we|our)\b",
    "self_claim": r"\b(i'm (the best|good at|an expert|very|really)|i used to|i have (been|worked)|we are a|"
                  r"we're a|our company|i know (how|what))\b",
    "deny": r"\b(i (never|didn't|did not|wasn't|haven't)|that's not true|not what i said)\b",
    "greeting": r"^(hi|hello|hey|good (morning|afternoon|evening)|bye|goodbye|see you|take care)\b",
    "easy": r"\b(no pressure|if you (want|like|prefer)|up to you|no rush|whenever|don't worry|it's easy|"
            r"would you like)\b",
}
_COMPILED = tuple(re.compile(p, re.IGNORECASE) for p in CUE_PATTERNS.values())
N_CUES = len(CUE_PATTERNS)


def cue_vector(text: str) -> np.ndarray:
    """1.0 for each cue found in `text`, else 0.0 (`CUE_PATTERNS` order); an empty text gives zeros."""
    t = text.strip()
    return np.array([1.0 if r.search(t) else 0.0 for r in _COMPILED], dtype=np.float32)
