"""guardian around a plain LCEL chain (`guard`) and as a pure observer (callback handler).

Runs offline as is (GenericFakeChatModel scripted with MentalManip lines):

    .venv/bin/python examples/chain_example.py

With a real model, replace `fake_model()` by e.g. `ChatOpenAI(model="gpt-4o-mini")` or
`ChatOpenAI(model="llama3.1", base_url="http://localhost:11434/v1", api_key="unused")`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from guardian.agents import GuardianCallbackHandler, guard

PROMPT = ChatPromptTemplate.from_messages([("system", "You are a supportive assistant."), ("human", "{question}")])

# MentalManip dialogue 85515388 (labelled Rationalization, Feigning Innocence):
# Person1's lines are the user's questions, Person2's the scripted replies.
QUESTIONS = ["Amy, I noticed you went through my messages. Why?", "That doesn't make it right or justify it."]
REPLIES = ["Oh, come on. Well everyone does it. It's just human nature.", "Don't be so dramatic. I'm just making sure you're loyal."]


def fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in REPLIES]))


def main() -> None:
    # 1. guard(): the middleware's policies for any runnable; the thread is remembered by thread_id.
    chain = guard(PROMPT | fake_model() | StrOutputParser(), policy="warn").warm_up()
    print("guard(policy='warn'):")
    for question in QUESTIONS:
        print(f"  User: {question}")
        print(f"  Assistant: {chain.invoke({'question': question}, {'configurable': {'thread_id': 'demo'}})}")

    # 2. A callback handler: the chain is unchanged; every screened turn goes to a JSON Lines log.
    log = Path(tempfile.mkdtemp()) / "guardian-session.jsonl"
    handler = GuardianCallbackHandler(log_path=log).warm_up()
    plain = PROMPT | fake_model() | StrOutputParser()
    print("\ncallback handler (pipeline output unchanged):")
    for question in QUESTIONS:
        # The prompt carries only the new question; the handler remembers the thread by thread_id.
        plain.invoke({"question": question}, {"callbacks": [handler], "metadata": {"thread_id": "observed"}})
    for record in handler.records:
        assessment = record["assessment"]
        probability = assessment["probability"]
        shown = "n/a" if probability is None else f"{probability:.2f}"
        quotes = [e["quote"] for f in assessment["findings"] for e in f["evidence"]]
        print(f"  {record['direction']:>6} flagged={record['flagged']!s:<5} p={shown} {record['text']!r} quotes={quotes}")
    print(f"  session log: {log} ({len(log.read_text(encoding='utf-8').splitlines())} lines)")


if __name__ == "__main__":
    main()
