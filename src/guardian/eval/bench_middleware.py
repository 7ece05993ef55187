"""What GuardianMiddleware costs per model call, measured on a real `create_agent`.

Two identical agents answer MentalManip dialogues turn by turn (user
turns from one speaker, scripted model replies from the other, history sent with
each call): one bare, one with `GuardianMiddleware` screening both directions.
Calls alternate between the two so machine noise hits both alike; the overhead of
a call is the guarded call's time minus the bare call's time on the same input.
The model is LangChain's GenericFakeChatModel, so what is measured is guardian
plus the two extra LangGraph nodes, not a network round trip. Each run replays
dialogues no earlier run used (detectors cache per-utterance work).

`guardian bench --suite middleware` runs it (`guardian.eval.bench`); other detectors, policies
or model latencies are `bench_middleware(...)`'s keyword options. It lives in `eval/`, not in
`agents/`: a benchmark uses the middleware, the middleware never uses a benchmark.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

Call = tuple[list[tuple[str, str]], str]


def _call_groups(groups: int, dialogues: int, *, min_turns: int = 4) -> list[list[Call]]:
    """`groups` disjoint sets of `dialogues` dialogues each, as calls in conversation order.

    A call is (history up to a user turn, the scripted reply). Every group uses
    dialogues no other group uses, because detectors cache per-utterance work: a
    measured run must meet new turns, as a live chatbot does, while the history
    within a dialogue is what earlier calls already saw.
    """
    from guardian.corpora.datasets import load_mentalmanip

    usable = [d for d in load_mentalmanip() if len(d.conversation.turns) >= min_turns]
    dialogues = min(dialogues, len(usable) // groups)  # many runs: fewer dialogues each, never reused
    out: list[list[Call]] = []
    for g in range(groups):
        calls: list[Call] = []
        for dialogue in usable[g * dialogues : (g + 1) * dialogues]:
            turns = dialogue.conversation.turns
            for i in range(0, len(turns) - 1, 2):
                history = [("user" if j % 2 == 0 else "assistant", t.text) for j, t in enumerate(turns[: i + 1])]
                calls.append((history, turns[i + 1].text))
        out.append(calls)
    return out


def _fake_model(replies: list[Any], latency_s: float) -> Any:
    """GenericFakeChatModel, optionally taking `latency_s` per call like a served model would."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class _Timed(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            if latency_s:
                time.sleep(latency_s)
            return super()._generate(*args, **kwargs)

    return _Timed(messages=iter(replies))


def bench_middleware(
    runs: int = 5,
    *,
    dialogues: int = 30,
    detectors: list[str] | None = None,
    policy: str = "observe",
    model_latency_ms: float = 0.0,
    streaming: bool = True,
) -> dict[str, Any]:
    """Per-call overhead p50/p95 in ms (median over `runs` after one warm-up run).

    With `streaming`, the figures also hold `streaming`: what screening a streamed reply
    under "block" adds (`guardian.eval.bench_streaming`), on dialogues these calls did not use.

    With `model_latency_ms=0` the model answers instantly: the worst case, where
    nothing hides guardian's time. A real model's latency lets the user-side screen
    (observe/warn) run while the model thinks.
    """
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

    from guardian.agents._engine import default_detector_names
    from guardian.agents.middleware import GuardianMiddleware, assessments
    from guardian.eval.timing import percentile

    names = detectors or default_detector_names()
    middleware = GuardianMiddleware(detectors=names, policy=policy)  # type: ignore[arg-type]
    middleware.warm_up()
    groups = _call_groups(runs + 1, dialogues)  # group 0 warms up; each run meets new dialogues

    def agent(guarded: bool) -> Any:
        replies = iter([AIMessage(content=reply) for calls in groups for _, reply in calls])
        model = _fake_model(list(replies), model_latency_ms / 1000.0)
        return create_agent(model, middleware=[middleware] if guarded else [])

    bare, guarded = agent(False), agent(True)

    def messages(history: list[tuple[str, str]]) -> list[AnyMessage]:
        return [HumanMessage(text) if role == "user" else AIMessage(text) for role, text in history]

    detector_ms: list[float] = []

    def one_run(calls: list[Call]) -> list[float]:
        overheads = []
        for history, _ in calls:
            msgs = messages(history)
            began = time.perf_counter()
            bare.invoke({"messages": msgs})
            bare_ms = (time.perf_counter() - began) * 1000
            began = time.perf_counter()
            result = guarded.invoke({"messages": msgs})
            guarded_ms = (time.perf_counter() - began) * 1000
            overheads.append(guarded_ms - bare_ms)
            # state keeps compact records; `assessments()` joins each with its message's full Assessment
            detector_ms.extend(r["assessment"]["latency_ms"] for r in assessments(result) if "assessment" in r)
        return overheads

    one_run(groups[0])  # warm-up
    detector_ms.clear()
    p50s, p95s = [], []
    for calls in groups[1:]:
        per_call = one_run(calls)
        p50s.append(percentile(per_call, 0.5))
        p95s.append(percentile(per_call, 0.95))
    detectors_used = middleware.screener.pool.detectors()
    figures: dict[str, Any] = {
        "detectors": [d.name for d in detectors_used],
        "policy": policy,
        "model_latency_ms": model_latency_ms,
        "calls_per_run": [len(calls) for calls in groups[1:]],
        "runs": runs,
        "overhead_per_model_call": {
            "p50_ms": round(statistics.median(p50s), 3),
            "p95_ms": round(statistics.median(p95s), 3),
        },
        "detector_time_per_screen": {
            "p50_ms": round(percentile(detector_ms, 0.5), 3),
            "p95_ms": round(percentile(detector_ms, 0.95), 3),
        },
        "target_p50_ms": 30.0,
        "data": f"data/mentalmanip/mentalmanip_con.csv: {runs + 1} disjoint sets of {dialogues} dialogues with >= 4 turns",
    }
    if streaming:
        from guardian.eval.bench_streaming import bench_streaming

        size = min(dialogues, 10)
        used = -(-(runs + 1) * dialogues // size)  # groups of `size` the calls above used: streaming meets new ones
        figures["streaming"] = bench_streaming(_call_groups(used + runs + 1, size)[used:], detectors=names)
    return figures


__all__ = ["bench_middleware"]
