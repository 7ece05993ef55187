"""The intent agent: what the speaker of the latest turn is doing, asked in two phases.

Seed 002 Appendix E: a zero-shot chain-of-thought question in two calls, first a
*reason explanation* (is the intention stated or implied, and what is it), then an
*option selection* that reads that reasoning and picks one lettered option. The
options here are the nine face acts, named by their codes and defined in the system
message by the labelling guidelines of the everyday face-act set (`prompts/intent_guidelines.md`,
the same as `data/README.md`'s), so the agent draws the lines the set and the local model draw
(an information question is `hneg-`, a plain answer `other`); the answer maps onto an `Intent`,
and votes over `samples` runs give its score.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, field_validator

from guardian.conversation import Conversation
from guardian.detectors.llm.client import LLMClient, LLMFailure, Usage
from guardian.detectors.llm.prompting import (
    Fence,
    Prompt,
    escape_speaker,
    fenced,
    new_fence_token,
    render,
)
from guardian.findings import Intent
from guardian.taxonomy import FaceAct

LETTERS = "ABCDEFGHI"
OPTIONS: tuple[FaceAct, ...] = tuple(FaceAct)


class IntentChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    option: str
    confidence: float | None = None

    @field_validator("option", mode="before")
    @classmethod
    def _letter(cls, value: Any) -> Any:
        """"H", "(H)", "(H) hneg-" or the act's code ("hneg-"): the options show both, models answer either.
        One code named is read first ("hpos-" starts with the letter of another option); two codes
        leave only a leading letter to go by."""
        text = str(value).strip()
        named = [LETTERS[i] for i, act in enumerate(OPTIONS)
                 if re.search(rf"(?<![\w+-]){re.escape(act.value)}(?![\w+-])", text, flags=re.IGNORECASE)]
        if len(named) == 1:
            return named[0]
        text = text.strip("().").upper()
        return text[:1] if text and text[0] in LETTERS[: len(OPTIONS)] else value

    @field_validator("option")
    @classmethod
    def _known(cls, value: str) -> str:
        if len(value) != 1 or value not in LETTERS[: len(OPTIONS)]:
            raise ValueError(f"option must be one of {LETTERS[: len(OPTIONS)]}")
        return value


def options_text() -> str:
    """The lettered options: each face act's code, as the guidelines in the system message define it."""
    return " ".join(f"({LETTERS[i]}) {act.value}" for i, act in enumerate(OPTIONS))


def reason_messages(window: Conversation, *, token: str | None = None) -> list[BaseMessage]:
    last = window.last
    assert last is not None
    fence = Fence(token or new_fence_token(window.as_text()), "TRANSCRIPT")
    letters = f"{LETTERS[0]} through {LETTERS[len(OPTIONS) - 1]}"
    question = render(
        Prompt.INTENT_REASON,
        turn=str(last.index),
        speaker=escape_speaker(last.speaker),
        label="TRANSCRIPT",
        letters=letters,
        options=options_text(),
    )
    return [
        SystemMessage(content=load_system()),
        HumanMessage(content=fenced(window, fence) + "\n\n" + question),
    ]


def load_system() -> str:
    return render(Prompt.INTENT_SYSTEM, guidelines=render(Prompt.INTENT_GUIDELINES).strip())


def select_messages(reasoning_prompt: list[BaseMessage], reasoning: str) -> list[BaseMessage]:
    letters = f"{LETTERS[0]} through {LETTERS[len(OPTIONS) - 1]}"
    return [
        *reasoning_prompt,
        AIMessage(content=reasoning),
        HumanMessage(content=render(Prompt.INTENT_SELECT, reasoning="", letters=letters).strip()),
    ]


class IntentAgent:
    """Face act and intention of the latest turn, by two-phase LLM prompting with votes."""

    def __init__(self, client: LLMClient, *, samples: int = 1, detector: str = "llm") -> None:
        self.client = client
        self.samples = samples
        self.detector = detector
        self.usage = Usage()

    def analyze(self, window: Conversation) -> tuple[Intent | None, LLMFailure | None]:
        last = window.last
        if last is None:
            return None, None
        prompt = reason_messages(window)
        votes: Counter[str] = Counter()
        error: LLMFailure | None = None
        for _ in range(self.samples):
            try:
                reasoning, used = self.client.say(prompt)
                self.usage.add(used)
                choice, used = self.client.ask(select_messages(prompt, reasoning), IntentChoice)
                self.usage.add(used)
            except LLMFailure as exc:
                self.usage.add(getattr(exc, "usage", Usage()))
                error = exc
                if exc.kind != "malformed":
                    break
                continue
            votes[choice.option] += 1
        if not votes:
            return None, error
        letter, count = votes.most_common(1)[0]
        act = OPTIONS[LETTERS.index(letter)]
        return (
            Intent(
                turn=last.index,
                speaker=last.speaker,
                face_act=act,
                score=count / self.samples,
                intention=f"{last.speaker} {act.general_intention}",
                detector=self.detector,
            ),
            error,
        )
