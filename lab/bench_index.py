"""Benchmark: embed and index the whole labelled set, then time filtered queries; prints JSON.

Run: `.venv/bin/python lab/bench_index.py [--data CSV] [--queries N]`. It builds into
a temporary folder (the user's store is untouched). Phases are timed separately:
MiniLM embedding of every dialogue, Chroma `upsert` with those precomputed vectors,
and balanced k=3 queries (2 manipulative + 1 not) with and without a technique filter.
A speed target is a benchmark, never a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.retrieval.embedding import MiniLMEmbeddingFunction
from guardian.retrieval.store import ExampleStore
from guardian.taxonomy import Technique


class _Precomputed(MiniLMEmbeddingFunction):
    """Serves vectors computed beforehand, so the index phase times Chroma alone."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.vectors = vectors

    def __call__(self, input: Any) -> Any:  # type: ignore[override]
        return [self.vectors[t] for t in input]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(mentalmanip_path("con")))
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()

    dialogues = load_mentalmanip(args.data)
    texts = [d.conversation.as_text() for d in dialogues]
    ef = MiniLMEmbeddingFunction()
    t0 = time.perf_counter()
    ef.warm_up()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectors = ef(texts)
    embed_s = time.perf_counter() - t0
    cached = _Precomputed(dict(zip(texts, vectors, strict=True)))

    with tempfile.TemporaryDirectory() as tmp:
        store = ExampleStore(path=tmp, embedding=cached)
        t0 = time.perf_counter()
        report = store.build(dialogues)
        add_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = store.build(dialogues)
        rebuild_noop_s = time.perf_counter() - t0

        real = ExampleStore(path=tmp, embedding=ef)  # queries embed their window for real
        rng = np.random.default_rng(0)
        picks = rng.choice(len(dialogues), size=min(args.queries, len(dialogues)), replace=False)
        plain: list[float] = []
        filtered: list[float] = []
        chroma_only: list[float] = []
        for i in picks:
            window = dialogues[int(i)].conversation
            t0 = time.perf_counter()
            store.query(window, technique=Technique.ACCUSATION)  # vector precomputed: Chroma alone
            chroma_only.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            real.query(window)
            plain.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            real.query(window, technique=Technique.ACCUSATION)
            filtered.append((time.perf_counter() - t0) * 1000)

    def q(values: list[float]) -> dict[str, float]:
        return {
            "median_ms": round(statistics.median(values), 1),
            "p95_ms": round(float(np.percentile(values, 95)), 1),
        }

    print(
        json.dumps(
            {
                "data": args.data,
                "dialogues": len(dialogues),
                "stored": report.total,
                "model_load_s": round(load_s, 2),
                "embed_s": round(embed_s, 1),
                "dialogues_per_s": round(len(dialogues) / embed_s, 1),
                "chroma_upsert_s": round(add_s, 2),
                "full_index_s": round(embed_s + add_s, 1),
                "second_build_s": round(rebuild_noop_s, 3),
                "second_build_added": again.added,
                "query_k3_technique_filter_chroma_only": q(chroma_only),
                "query_k3_incl_embedding": q(plain),
                "query_k3_technique_filter_incl_embedding": q(filtered),
                "torch_threads": __import__("torch").get_num_threads(),
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "python": platform.python_version(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
