"""Similar labelled examples for a finding, from the Chroma example store when one exists.

`guardian.retrieval` is optional at run time (it pulls in Chroma and an encoder),
so it is imported here, lazily, in a worker thread, and any absence or failure
becomes a one-line note instead of an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from guardian.conversation import Conversation
from guardian.findings import Finding


@dataclass(frozen=True, slots=True)
class SimilarExamples:
    examples: tuple[str, ...]
    note: str | None = None


SimilarLookup = Callable[[Finding, Conversation], SimilarExamples]


def similar_examples(finding: Finding, window: Conversation, *, k: int = 2) -> SimilarExamples:
    try:
        from guardian.retrieval.store import ExampleStore
    except ImportError:
        return SimilarExamples((), "no example store (guardian.retrieval is not installed)")
    try:
        store = ExampleStore.from_settings()
        ok, why = store.ready()
        if not ok:
            return SimilarExamples((), why or "the example store is not built; run `guardian index`")
        hits = store.query(window, manipulative=k, other=0, technique=finding.technique)
    except Exception as exc:  # the store is a bonus: never let it break the details view
        return SimilarExamples((), f"the example store could not be queried ({type(exc).__name__}: {exc})")
    rendered = []
    for hit in hits:
        labels = ", ".join(t.value for t in hit.techniques) or ("manipulative" if hit.manipulative else "not manipulative")
        rendered.append(f"[{labels}] {hit.text}")
    return SimilarExamples(tuple(rendered), None if rendered else "no similar labelled examples found")
