"""`guardian eval mentalmanip` and `guardian train`: the local model measured on labelled CSVs.

Evaluation runs the product path: each dialogue goes through
`LocalModelDetector.analyze` (whole dialogue as the window), so the decision,
threshold and latency are what a user gets. Technique/vulnerability predictions
are the labels whose conditional probability is within the model's tuned ratio of
the most likely label (so at least one is always named, as the detector does when
it flags a conversation, and as the paper's protocol asks of every model on the
dialogues that carry such labels).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from guardian.detectors.local import LocalModelDetector
from guardian.detectors.local_train import TECHNIQUES, VULNERABILITIES, Predictions, label_matrices
from guardian.eval.datasets import LabelledDialogue, load_mentalmanip
from guardian.eval.metrics import MentalManipReport, binary_metrics, multilabel_metrics


def evaluate_dialogues(
    dialogues: Sequence[LabelledDialogue],
    *,
    detector: LocalModelDetector,
    show_progress: bool = False,
) -> MentalManipReport:
    """Metrics of `detector` on labelled dialogues it never trained on."""
    from tqdm import tqdm

    model = detector.model()
    decisions: list[bool] = []
    latencies: list[float] = []
    # Dialogues one at a time: `latency_ms_p50` is what one user waits for one verdict.
    for d in tqdm(dialogues, desc="evaluating", disable=not show_progress, leave=False):
        started = time.perf_counter()
        assessment = detector.analyze(d.conversation)
        latencies.append((time.perf_counter() - started) * 1000)
        decisions.append(assessment.decision)
    y, t, v = label_matrices(dialogues)
    pred = model.predict([d.conversation for d in dialogues])
    return MentalManipReport(
        binary=binary_metrics(y == 1, np.array(decisions, dtype=bool)),
        techniques=multilabel_metrics(
            t, label_decisions(pred, "techniques"), labels=[x.value for x in TECHNIQUES]
        ),
        vulnerabilities=multilabel_metrics(
            v, label_decisions(pred, "vulnerabilities"), labels=[x.value for x in VULNERABILITIES]
        ),
        latency_ms_p50=statistics.median(latencies) if latencies else 0.0,
    )


def label_decisions(pred: Predictions, which: str) -> np.ndarray:
    """Labels passing their thresholds, plus each row's most likely label when none does."""
    if which == "techniques":
        scores, chosen = pred.techniques, pred.technique_decisions
    else:
        scores, chosen = pred.vulnerabilities, pred.vulnerability_decisions
    chosen = np.array(chosen, dtype=bool, copy=True)
    empty = ~chosen.any(axis=1)
    if scores.shape[1]:
        chosen[np.flatnonzero(empty), np.argmax(scores[empty], axis=1)] = True
    return chosen


def evaluate_file(path: str | Path, *, artifact_dir: Path | None = None, show_progress: bool = False) -> MentalManipReport:
    """The report on a CSV, with the live replay of its non-manipulative dialogues (window: `[monitor] window`)."""
    import dataclasses

    from guardian.config import settings
    from guardian.eval.replay import ReplayOptions, mentalmanip_live

    dialogues = load_mentalmanip(Path(path))
    detector = LocalModelDetector(artifact_dir=artifact_dir)
    report = evaluate_dialogues(dialogues, detector=detector, show_progress=show_progress)
    options = ReplayOptions(window=settings().monitor.window, show_progress=show_progress)
    return dataclasses.replace(report, live=mentalmanip_live(dialogues, detector, options=options))


def training_files(data: Sequence[str] | None) -> list[Path]:
    """CSV paths from `--data` values: files as given; a folder gives its mentalmanip_con/maj CSVs
    (or, failing those, every CSV in it)."""
    from guardian.errors import InputError

    if not data:
        return []
    out: list[Path] = []
    for item in data:
        path = Path(item).expanduser()
        if path.is_dir():
            found = [p for p in (path / "mentalmanip_con.csv", path / "mentalmanip_maj.csv") if p.is_file()]
            if not found:
                mm = path / "mentalmanip"
                found = [p for p in (mm / "mentalmanip_con.csv", mm / "mentalmanip_maj.csv") if p.is_file()]
            found = found or sorted(path.glob("*.csv"))
            if not found:
                raise InputError("no MentalManip CSV in this folder", source=str(path))
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise InputError("file not found", source=str(path))
    return out


def run_train(*, data: Sequence[str] | None, out: str | None, seed: int) -> str:
    """Train, save, and return a one-paragraph summary for the terminal."""
    import json

    from guardian.detectors import local_artifact
    from guardian.detectors.local import forget_loaded_models
    from guardian.detectors.local_train import TrainConfig, tqdm_progress

    directory = local_artifact.build(
        data=training_files(data) or None,
        out=Path(out).expanduser() if out else None,
        config=TrainConfig(seed=seed),
        progress=tqdm_progress(),
    )
    forget_loaded_models()
    manifest = local_artifact.read_manifest(directory)
    metrics = json.dumps(manifest.get("metrics", {}))
    return (
        f"trained on {manifest.get('n_dialogues')} dialogues"
        f" (+{manifest.get('n_label_only_dialogues', 0)} for the label heads only; data sha256 {str(manifest.get('data_sha256'))[:12]}); "
        f"artifact: {directory}; inner out-of-fold: {metrics}"
    )
