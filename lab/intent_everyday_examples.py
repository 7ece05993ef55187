"""The issue's example turns (issue 25), each the last turn of a short made-up conversation, through the
shipped intent detector: act, probability, whether it is shown, whether a charity description is given.
Usage: python lab/intent_everyday_examples.py
"""

from __future__ import annotations

from guardian.conversation import Conversation
from guardian.detectors.intent import IntentDetector

CONVERSATIONS = {
    "scam": [("Caller", "Hello ma'am, this is Officer Brown from the tax office."), ("Ann", "Oh. What is this about?"),
             ("Caller", "There is a warrant in your name. You need to pay the fine today with gift cards."),
             ("Ann", "I don't think so. I'd like to call the office myself."),
             ("Caller", "Ma'am, if you don't cooperate, you will lose everything.")],
    "work": [("Ann", "Morning Tom."), ("Tom", "Morning."), ("Ann", "Send me the report by five today.")],
    "service": [("Agent", "Thank you for calling, how can I help?"),
                ("Bob", "Your company charged me twice, this is ridiculous.")],
    "selfpraise": [("Kim", "How did the pitch go?"), ("Lee", "Honestly, I nailed it. I'm the best closer on the team.")],
}


def main() -> None:
    detector = IntentDetector()
    for name, pairs in CONVERSATIONS.items():
        intent = detector.analyze(Conversation.from_pairs(pairs, id=name)).intents[0]
        print(f"{name}: {pairs[-1][1]!r} -> {intent.face_act.value} {intent.score:.2f} "
              f"{'(abstained)' if intent.abstained else '(shown)'} charity description: "
              f"{intent.domain_intention is not None}")


if __name__ == "__main__":
    main()
