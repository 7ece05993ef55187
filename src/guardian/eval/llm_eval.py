"""`guardian eval mentalmanip --detector llm|cascade`: the LLM paths measured like the local model.

The same metrics and JSON keys as the local model's evaluation (guardian.eval.metrics),
through the product path (`analyze` on the whole dialogue), plus what the LLM cost:
requests, tokens, failed requests, dialogues it was consulted on, and latency
percentiles. Few-shot examples come from the example store, which never returns
the dialogue being evaluated (by id or identical text).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from guardian.corpora.datasets import LabelledDialogue, load_mentalmanip
from guardian.detectors.base import Detector
from guardian.findings import Assessment
from guardian.taxonomy import Technique, Vulnerability

LLM_DETECTORS = ("llm", "cascade")
_T = TypeVar("_T")


def _label_rows(assessments: Sequence[Assessment], which: str, labels: Sequence[Any]) -> np.ndarray:
    """Labels the assessment names with a score >= 0.5, or its most likely one when none is."""
    rows = np.zeros((len(assessments), len(labels)), dtype=bool)
    for i, a in enumerate(assessments):
        scores: dict[Any, float] = dict(a.techniques if which == "techniques" else a.vulnerabilities)
        for j, label in enumerate(labels):
            rows[i, j] = scores.get(label, 0.0) >= 0.5
        if not rows[i].any() and scores:
            best = max(scores, key=lambda k: scores[k])
            rows[i, list(labels).index(best)] = True
    return rows


def evaluate_detector(
    dialogues: Sequence[LabelledDialogue], detector: Detector, *, show_progress: bool = False
) -> dict[str, float | int]:
    from tqdm import tqdm

    from guardian.eval.metrics import MentalManipReport, binary_metrics, multilabel_metrics

    assessments: list[Assessment] = []
    latencies: list[float] = []
    errors = 0
    for d in tqdm(dialogues, desc=f"evaluating {detector.name}", disable=not show_progress, leave=False):
        started = time.perf_counter()
        a = detector.analyze(d.conversation)
        latencies.append((time.perf_counter() - started) * 1000)
        errors += bool(a.errors)
        assessments.append(a)
    techniques, vulnerabilities = list(Technique), list(Vulnerability)
    truth_t = np.array([[t in d.techniques for t in techniques] for d in dialogues], dtype=bool)
    truth_v = np.array([[v in d.vulnerabilities for v in vulnerabilities] for d in dialogues], dtype=bool)
    report = MentalManipReport(
        binary=binary_metrics(
            np.array([d.manipulative for d in dialogues], dtype=bool),
            np.array([a.decision for a in assessments], dtype=bool),
        ),
        techniques=multilabel_metrics(
            truth_t.reshape(len(dialogues), len(techniques)),
            _label_rows(assessments, "techniques", techniques),
            labels=[t.value for t in techniques],
        ),
        vulnerabilities=multilabel_metrics(
            truth_v.reshape(len(dialogues), len(vulnerabilities)),
            _label_rows(assessments, "vulnerabilities", vulnerabilities),
            labels=[v.value for v in vulnerabilities],
        ),
        latency_ms_p50=statistics.median(latencies) if latencies else 0.0,
    )
    out: dict[str, float | int] = dict(report.as_dict())
    usage = getattr(detector, "usage", None)
    out["latency_ms_p95"] = round(float(np.percentile(latencies, 95)), 1) if latencies else 0.0
    out["llm_calls"] = int(getattr(usage, "calls", 0))
    out["llm_failed_calls"] = int(getattr(usage, "failed_calls", 0))
    out["llm_tokens"] = int(getattr(usage, "tokens", 0))
    out["llm_consulted"] = int(getattr(detector, "consulted", 0))
    out["dialogues_with_errors"] = errors
    return out


def sample(items: list[_T], limit: int | None, *, seed: int = 17) -> list[_T]:
    """A seeded random subset, in the items' order (LLM evaluation of a whole set can be slow or costly)."""
    if limit is None or limit >= len(items):
        return items
    rng = np.random.default_rng(seed)
    picks = sorted(rng.choice(len(items), size=limit, replace=False).tolist())
    return [items[i] for i in picks]


def evaluate_file(
    path: str | Path, *, detector: str, limit: int | None = None, show_progress: bool = False
) -> dict[str, float | int]:
    """Evaluate a registered detector (`llm`, `cascade`) on a MentalManip CSV."""
    from guardian.detectors import registry
    from guardian.errors import ModelUnavailable

    instance = registry.create(detector)
    unavailable = getattr(instance, "unavailable", None) or getattr(getattr(instance, "llm", None), "unavailable", None)
    if detector == "llm" and unavailable:
        raise ModelUnavailable(f"cannot evaluate the LLM detector: {unavailable}")
    return evaluate_detector(sample(load_mentalmanip(Path(path)), limit), instance, show_progress=show_progress)
