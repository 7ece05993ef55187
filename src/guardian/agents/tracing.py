"""Verdicts in LangSmith (and any LangChain callback): one small child run per screened turn.

Why a child run: LangSmith shows a run's metadata and tags and lets a team filter
on them ("every flagged reply last week"), but a middleware hook cannot change the
metadata of the node run it is part of once that run has started. So each verdict
is recorded as a run of its own, named `guardian`, under the hook's run: its input
and output are the compact state record (decision, probability, techniques, evidence
spans - the screened text itself only as quoted evidence), its metadata the same
fields under `guardian_*` keys, its tags `guardian`, `guardian:<decision>`,
`guardian:<action>` and `guardian:technique:<name>`.

Only when the run has callback handlers (LangSmith tracing on, or the application's
own): otherwise nothing is created and nothing costs.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda

RUN_NAME = "guardian"


def verdict_metadata(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "guardian_direction": record.get("direction"),
        "guardian_decision": record.get("decision"),
        "guardian_action": record.get("action"),
        "guardian_flagged": record.get("flagged"),
        "guardian_probability": record.get("probability"),
        "guardian_techniques": list(record.get("techniques") or []),
        "guardian_message_id": record.get("message_id"),
    }


def verdict_tags(record: dict[str, Any]) -> list[str]:
    tags = ["guardian", f"guardian:{record.get('decision')}", f"guardian:{record.get('action')}"]
    tags += [f"guardian:technique:{t}" for t in record.get("techniques") or []]
    if record.get("injection"):
        tags.append("guardian:injected_instructions")
    return tags


def _callbacks() -> Any | None:
    """The hook's callbacks, when they have handlers that would see a child run."""
    from langgraph.config import get_config

    try:
        config = get_config()
    except RuntimeError:  # a hook called outside a graph run (tests call hooks directly)
        return None
    callbacks = config.get("callbacks")
    handlers = getattr(callbacks, "handlers", callbacks)
    return callbacks if handlers else None


def _echo(record: dict[str, Any]) -> dict[str, Any]:
    return record


_RUNNABLE = RunnableLambda(_echo, name=RUN_NAME)


def _config(record: dict[str, Any]) -> RunnableConfig | None:
    callbacks = _callbacks()
    if callbacks is None:
        return None
    return RunnableConfig(callbacks=callbacks, run_name=RUN_NAME, metadata=verdict_metadata(record), tags=verdict_tags(record))


def trace_verdict(record: dict[str, Any]) -> None:
    """Record the verdict as a child run of the current hook's run (sync hooks)."""
    config = _config(record)
    if config is not None:
        _RUNNABLE.invoke(record, config)


async def atrace_verdict(record: dict[str, Any]) -> None:
    """The same from an async hook (async callback handlers are awaited, not run in a thread)."""
    config = _config(record)
    if config is not None:
        await _RUNNABLE.ainvoke(record, config)


__all__ = ["RUN_NAME", "atrace_verdict", "trace_verdict", "verdict_metadata", "verdict_tags"]
