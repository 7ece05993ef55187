"""What screening a streamed reply costs the client, measured on a real `create_agent`.

Two identical agents stream MentalManip replies with `stream_mode="messages"`: one
bare, one with `GuardianMiddleware(policy="block", apply_to_input=False)`: the figures
are about the reply's stream (a user turn screened first adds its own screen time to the
first token, as `overhead_per_model_call` shows; a refused user turn streams no reply).
The model is LangChain's GenericFakeChatModel paced at `token_ms` per streamed chunk
(it streams words and the spaces between them as separate chunks), so a sentence takes
as long to arrive as it would from a served model and the hold-back is what a user waits.
Calls alternate between the two agents on the same input.

Per call:
- time to first token (TTFT): first non-empty text chunk the client gets, from the call;
  the figure is the guarded TTFT minus the bare TTFT on the same input;
- hold-back: a plain callback handler (not a streaming one, so the relay leaves it be)
  notes when each raw token left the model; for every raw token, the characters the
  model had produced but the client had not yet received (chars), and for every
  character, how long after the model produced it the client got it (ms). Only replies
  that streamed through unchanged count here (a blocked reply is replaced, not delayed);
- per-chunk overhead: (guarded total - bare total) / raw chunks of the reply.

Medians over calls, then the median over `runs` runs, each on dialogues no other run
(nor the invoke benchmark before it) used, because detectors cache per-utterance work.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

Call = tuple[list[tuple[str, str]], str]
"""(history up to a user turn, the scripted reply), as `bench_middleware` builds them."""


def _paced_model(replies: list[Any], token_ms: float) -> Any:
    """GenericFakeChatModel that takes `token_ms` per streamed chunk, like a served model."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class _Paced(GenericFakeChatModel):
        def _stream(self, *args: Any, **kwargs: Any) -> Any:
            for chunk in super()._stream(*args, **kwargs):
                time.sleep(token_ms / 1000.0)
                yield chunk

    return _Paced(messages=iter(replies))


def _clock() -> Any:
    """A plain callback handler noting when each raw model token was produced."""
    from langchain_core.callbacks import BaseCallbackHandler

    class _Clock(BaseCallbackHandler):
        run_inline = True

        def __init__(self) -> None:
            self.tokens: list[tuple[float, int]] = []

        def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
            self.tokens.append((time.perf_counter(), len(token) if isinstance(token, str) else 0))

    return _Clock()


def _stream(agent: Any, messages: list[Any], clock: Any | None) -> tuple[float, list[tuple[float, str]], float]:
    """(start, [(time, text)] of the model's text chunks the client got, end)."""
    config = {"callbacks": [clock]} if clock is not None else None
    began = time.perf_counter()
    got: list[tuple[float, str]] = []
    for chunk, meta in agent.stream({"messages": messages}, config, stream_mode="messages"):
        if meta.get("langgraph_node") == "model" and chunk.text:
            got.append((time.perf_counter(), chunk.text))
    return began, got, time.perf_counter()


def _held(raw: list[tuple[float, int]], got: list[tuple[float, str]]) -> tuple[list[int], list[float]]:
    """Chars produced but not yet shown at each raw token; ms each char waited to be shown."""
    produced: list[float] = []  # time each char left the model
    for t, n in raw:
        produced.extend([t] * n)
    shown: list[float] = []
    for t, text in got:
        shown.extend([t] * len(text))
    chars = []
    j = 0
    for t, _ in raw:
        while j < len(shown) and shown[j] <= t:
            j += 1
        made = sum(1 for p in produced if p <= t)
        chars.append(max(made - j, 0))
    waits = [(s - p) * 1000 for p, s in zip(produced, shown, strict=False)]
    return chars, waits


def bench_streaming(
    groups: list[list[Call]],
    *,
    detectors: list[str] | None = None,
    token_ms: float = 10.0,
    max_calls: int = 20,
) -> dict[str, Any]:
    """Streaming figures for `GuardianMiddleware(policy="block")`; see the module docstring.

    `groups`: one warm-up group, then one per run, each of dialogues no other group uses.
    """
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

    from guardian.agents._engine import default_detector_names
    from guardian.agents.middleware import GuardianMiddleware
    from guardian.eval.timing import percentile

    names = detectors or default_detector_names()
    middleware = GuardianMiddleware(detectors=names, policy="block", apply_to_input=False).warm_up()
    groups = [calls[:max_calls] for calls in groups]

    def agent(guarded: bool) -> Any:
        replies = [AIMessage(content=reply) for calls in groups for _, reply in calls]
        return create_agent(_paced_model(replies, token_ms), middleware=[middleware] if guarded else [])

    bare, guarded = agent(False), agent(True)

    def messages(history: list[tuple[str, str]]) -> list[AnyMessage]:
        return [HumanMessage(text) if role == "user" else AIMessage(text) for role, text in history]

    def one_run(calls: list[Call]) -> dict[str, Any]:
        ttft, per_chunk, chars, waits = [], [], [], []
        replaced = 0
        for history, reply in calls:
            msgs = messages(history)
            b0, bare_got, b1 = _stream(bare, msgs, None)
            clock = _clock()
            g0, got, g1 = _stream(guarded, msgs, clock)
            if not bare_got or not got:
                continue
            ttft.append((got[0][0] - g0 - (bare_got[0][0] - b0)) * 1000)
            per_chunk.append(((g1 - g0) - (b1 - b0)) * 1000 / max(len(clock.tokens), 1))
            if "".join(t for _, t in got) != reply:
                replaced += 1
                continue
            held_chars, held_ms = _held(clock.tokens, got)
            chars.extend(held_chars)
            waits.extend(held_ms)
        def pct(values: list[float] | list[int], q: float) -> float | None:
            return percentile([float(v) for v in values], q) if values else None  # none: every reply was replaced

        return {
            "ttft": pct(ttft, 0.5),
            "per_chunk": pct(per_chunk, 0.5),
            "chars_p50": pct(chars, 0.5),
            "chars_max": max(chars) if chars else 0,
            "ms_p50": pct(waits, 0.5),
            "ms_p95": pct(waits, 0.95),
            "replaced": replaced,
            "calls": len(calls),
        }

    one_run(groups[0])  # warm-up
    results = [one_run(calls) for calls in groups[1:]]

    def med(key: str) -> float | None:
        values = [r[key] for r in results if r[key] is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        "policy": "block",
        "stream_mode": "messages",
        "token_ms": token_ms,
        "calls_per_run": [r["calls"] for r in results],
        "replies_replaced_per_run": [r["replaced"] for r in results],
        "added_time_to_first_token_ms": {"p50": med("ttft")},
        "hold_back": {
            "chars_p50": med("chars_p50"),
            "chars_max": max(r["chars_max"] for r in results),
            "ms_p50": med("ms_p50"),
            "ms_p95": med("ms_p95"),
        },
        "overhead_per_chunk_ms": {"p50": med("per_chunk")},
        "runs": len(results),
        "data": f"data/mentalmanip/mentalmanip_con.csv: {len(groups)} disjoint sets of dialogues the invoke "
        f"benchmark did not use; at most {max_calls} calls each",
    }


__all__ = ["bench_streaming"]
