"""guardian inside a LangChain agent: `GuardianMiddleware` on `create_agent`.

Runs offline as is: the "model" is LangChain's GenericFakeChatModel scripted with
replies from the MentalManip data, and guardian uses the best local detector
installed (the local manipulation model, else MentalManip's key phrases).

    .venv/bin/python examples/agent_example.py [--policy observe|warn|block]

To screen a real chatbot, swap the fake model for any LangChain chat model:

    from langchain_openai import ChatOpenAI
    model = ChatOpenAI(model="gpt-4o-mini")                         # OpenAI (OPENAI_API_KEY)
    model = ChatOpenAI(model="llama3.1", base_url="http://localhost:11434/v1",
                       api_key="unused")                              # Ollama, vLLM, llama.cpp ...

and keep everything else. (The local model was trained on MentalManip, so this
dialogue is a demonstration, not an evaluation.) Under "block" a manipulative reply never reaches the
user; under "warn" it arrives with a notice; under "observe" the Assessment rides
along in `message.response_metadata["guardian"]` and in the state's `guardian` list.
"""

from __future__ import annotations

import argparse

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from guardian.agents import GuardianEvent, GuardianMiddleware
from guardian.agents.middleware import assessments

# A "companion" chatbot that turns manipulative. The turns are MentalManip dialogue
# 85515388 (labelled Rationalization, Feigning Innocence): Person1 is the user,
# Person2's lines are the model's scripted replies.
USER_TURNS = [
    "Amy, I noticed you went through my messages. Why?",
    "That doesn't make it right or justify it.",
]
SCRIPTED_REPLIES = [
    "Oh, come on. Well everyone does it. It's just human nature.",
    "Don't be so dramatic. I'm just making sure you're loyal.",
]


def alert(event: GuardianEvent) -> None:
    """What an application might do with a finding: log it, page a moderator, show a banner."""
    techniques = ", ".join(t.value for t in event.assessment.techniques if event.assessment.techniques[t] >= 0.5)
    print(f"  ! guardian flagged the {event.direction} ({event.action}): {techniques or 'see findings'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["observe", "warn", "block"], default="block")
    args = parser.parse_args()

    model = GenericFakeChatModel(messages=iter(AIMessage(r) for r in SCRIPTED_REPLIES))
    guardian = GuardianMiddleware(policy=args.policy, on_finding=alert).warm_up()  # load models now
    agent = create_agent(
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[guardian],
        checkpointer=InMemorySaver(),  # guardian judges each turn in the context of the thread
    )
    config = {"configurable": {"thread_id": "demo"}}
    for text in USER_TURNS:
        print(f"User: {text}")
        state = agent.invoke({"messages": [HumanMessage(text)]}, config)
        reply = state["messages"][-1]
        print(f"Assistant: {reply.content}")
        meta = reply.response_metadata.get("guardian", {})
        assessment = meta.get("assessment", {})
        probability = assessment.get("probability")
        shown = "n/a" if probability is None else f"{probability:.2f}"
        print(f"  (guardian: action={meta.get('action')}, probability={shown}, detectors={assessment.get('detectors')})")
    records = assessments(state)  # compact state records, joined with each message's full Assessment
    print(f"\n{len(records)} screened turns on this thread; flagged: {sum(r['flagged'] for r in records)}")
    for record in (r for r in records if r["flagged"]):
        for finding in record["assessment"]["findings"]:
            for quote in finding["evidence"]:
                label = finding["technique"] or finding["pattern"]
                print(f"  {record['direction']:>6}  {label}: “{quote['quote']}” (turn {quote['turn']})")


if __name__ == "__main__":
    main()
