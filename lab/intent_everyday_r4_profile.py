"""Round 4 of the everyday face-act experiment (issue 25): where an everyday turn's time goes.

Runs the bench's per-turn measurement (`guardian.eval.bench._Fresh`: unseen 40-turn stitched movie
dialogues, each new turn assessed with its 10-turn window) with one intent artifact and times each
pass inside the turn (wall and the thread's CPU): the linear half's features (MiniLM pass, TF-IDF),
the frozen mpnet-6 pass, the everyday tuned half's pass; and whether a gated deep head sent the turn
on to the tuned half. Prints per-turn wall p50/p95 split by that, and each pass's median.
Usage: python lab/intent_everyday_r4_profile.py ARTIFACT_DIR [CONVERSATIONS]
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from guardian.detectors.intent.detector import IntentDetector
from guardian.eval.bench import _Fresh

spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
_lock = threading.Lock()


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            with _lock:
                spans[name].append((1000 * (time.perf_counter() - w0), 1000 * (time.thread_time() - c0)))
    return wrapper


def main(artifact: str, conversations: int) -> None:
    detector = IntentDetector(model_path=artifact)
    detector.warm_up()
    model = detector.model()
    model.features = timed("linear features", model.features)  # type: ignore[method-assign]
    ev = model.everyday
    if ev is not None:
        if ev.frozen is not None:
            ev.frozen.encode = timed("frozen pass", ev.frozen.encode)  # type: ignore[method-assign]
        if ev.tuned is not None:
            ev.tuned.predict_proba = timed("everyday tuned pass", ev.tuned.predict_proba)  # type: ignore[method-assign]
        ev.proba = timed("everyday MiniLM head", ev.proba)  # type: ignore[method-assign]
    fresh = _Fresh()
    fresh.conversation(40)
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: list[float] = []
    for _ in range(conversations):
        conv = fresh.conversation(40)
        for i in range(len(conv)):
            w = conv.window(10, ending_at=i)
            before = getattr(model, "tuned_on_unsure", 0)
            c0, w0 = time.process_time(), time.perf_counter()
            detector.analyze(w)
            cpu.append(1000 * (time.process_time() - c0))
            wall[getattr(model, "tuned_on_unsure", 0) > before].append(1000 * (time.perf_counter() - w0))
    every = wall[True] + wall[False]
    print(f"{artifact}: {len(every)} turns, wall p50 {np.median(every):.1f} ms p95 {np.quantile(every, .95):.1f}; "
          f"process CPU per turn p50 {np.median(cpu):.1f} mean {np.mean(cpu):.1f}")
    for k, v in wall.items():
        if v:
            print(f"  gated tuned pass {'read' if k else 'skipped'}: {len(v)} turns ({len(v) / len(every):.2f}), "
                  f"wall p50 {np.median(v):.1f} ms")
    for name, v in spans.items():
        a = np.array(v)
        print(f"  {name:22} {len(a)} calls: wall p50 {np.median(a[:, 0]):.2f} ms, thread CPU p50 {np.median(a[:, 1]):.2f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4)
