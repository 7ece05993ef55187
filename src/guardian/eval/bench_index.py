"""`guardian bench --suite index`: build the example store from the labelled set, then query it.

The store is built in a temporary folder (the user's store is untouched). Phases are timed
apart: MiniLM embedding of every dialogue, Chroma's upsert of those precomputed vectors,
a second build (nothing to add), and balanced k=3 queries (2 manipulative + 1 not) with
and without a technique filter, with the window's embedding and without it (Chroma alone).
The build phases run once (the whole set takes minutes on 2 cores); the queries give
medians over `runs` runs, each on windows no earlier run asked about.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from guardian.eval.timing import Figures, latency_runs


def bench_index(runs: int, *, dialogues: int | None = None, queries: int = 20) -> Figures:
    """Index `dialogues` of mentalmanip_con (all by default) and time `queries` queries per run."""
    from guardian.conversation import Conversation
    from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
    from guardian.retrieval.embedding import MiniLMEmbeddingFunction
    from guardian.retrieval.store import ExampleStore
    from guardian.taxonomy import Technique

    class Precomputed(MiniLMEmbeddingFunction):
        """Serves vectors computed beforehand, so the upsert and Chroma-only queries time Chroma alone."""

        def __init__(self, vectors: dict[str, Any]) -> None:
            super().__init__()
            self.vectors = vectors

        def __call__(self, input: Any) -> Any:  # Chroma names the parameter `input`
            return [self.vectors[t] for t in input]

    data = load_mentalmanip(mentalmanip_path("con"))[:dialogues]
    texts = [d.conversation.as_text() for d in data]
    embedding = MiniLMEmbeddingFunction()
    began = time.perf_counter()
    embedding.warm_up()
    load_s = time.perf_counter() - began
    began = time.perf_counter()
    vectors = embedding(texts)
    embed_s = time.perf_counter() - began
    order = [int(i) for i in np.random.default_rng(0).permutation(len(data))]
    asked = 0

    def windows() -> list[Conversation]:
        """The next `queries` dialogues in a fixed random order (cycling only when the set is small)."""
        nonlocal asked
        picked = [data[order[(asked + k) % len(order)]].conversation for k in range(queries)]
        asked += queries
        return picked

    def timed(query: Callable[[Conversation], object]) -> Callable[[], list[float]]:
        def run() -> list[float]:
            out = []
            for window in windows():
                began = time.perf_counter()
                query(window)
                out.append((time.perf_counter() - began) * 1000)
            return out

        return run

    with tempfile.TemporaryDirectory(prefix="guardian-bench-index-") as tmp:
        cached = ExampleStore(path=tmp, embedding=Precomputed(dict(zip(texts, vectors, strict=True))))
        began = time.perf_counter()
        built = cached.build(data)
        upsert_s = time.perf_counter() - began
        began = time.perf_counter()
        again = cached.build(data)
        second_s = time.perf_counter() - began
        real = ExampleStore(path=tmp, embedding=embedding)  # these queries embed their window
        figures: Figures = {
            "dialogues": len(data),
            "stored": built.total,
            "model_load_s": round(load_s, 2),
            "embed_s": round(embed_s, 1),
            "dialogues_per_s": round(len(data) / embed_s, 1) if embed_s else None,
            "chroma_upsert_s": round(upsert_s, 2),
            "full_index_s": round(embed_s + upsert_s, 1),
            "second_build_s": round(second_s, 3),
            "second_build_added": again.added,
            "query_k3_technique_filter_chroma_only": latency_runs(
                timed(lambda w: cached.query(w, technique=Technique.ACCUSATION)), runs=runs
            ),
            "query_k3": latency_runs(timed(real.query), runs=runs),
            "query_k3_technique_filter": latency_runs(
                timed(lambda w: real.query(w, technique=Technique.ACCUSATION)), runs=runs
            ),
        }
    return figures
