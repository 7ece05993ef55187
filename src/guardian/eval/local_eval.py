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

from guardian.corpora.datasets import LabelledDialogue, load_mentalmanip
from guardian.detectors.local.detector import LocalModelDetector
from guardian.detectors.local.model import TECHNIQUES, VULNERABILITIES
from guardian.eval.metrics import MentalManipReport, binary_metrics, multilabel_metrics


def evaluate_dialogues(
    dialogues: Sequence[LabelledDialogue],
    *,
    detector: LocalModelDetector,
    show_progress: bool = False,
) -> MentalManipReport:
    """Metrics of `detector` on labelled dialogues it never trained on (the whole dialogue as the window)."""
    from tqdm import tqdm

    model = detector.model()
    decisions: list[bool] = []
    latencies: list[float] = []
    techniques: list[list[float]] = []
    vulnerabilities: list[list[float]] = []
    # Dialogues one at a time: `latency_ms_p50` is what one user waits for one verdict.
    for d in tqdm(dialogues, desc="evaluating", disable=not show_progress, leave=False):
        started = time.perf_counter()
        assessment = detector.analyze(d.conversation)
        latencies.append((time.perf_counter() - started) * 1000)
        decisions.append(assessment.decision)
        techniques.append([assessment.techniques.get(t, 0.0) for t in TECHNIQUES])
        vulnerabilities.append([assessment.vulnerabilities.get(v, 0.0) for v in VULNERABILITIES])
    y, t, v = label_matrices(dialogues)
    return MentalManipReport(
        binary=binary_metrics(y == 1, np.array(decisions, dtype=bool)),
        techniques=multilabel_metrics(
            t, label_decisions(np.array(techniques).reshape(-1, len(TECHNIQUES)), model.technique_ratio),
            labels=[x.value for x in TECHNIQUES],
        ),
        vulnerabilities=multilabel_metrics(
            v, label_decisions(np.array(vulnerabilities).reshape(-1, len(VULNERABILITIES)), model.vulnerability_ratio),
            labels=[x.value for x in VULNERABILITIES],
        ),
        latency_ms_p50=statistics.median(latencies) if latencies else 0.0,
    )


def label_matrices(dialogues: Sequence[LabelledDialogue]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(manipulative 0/1, technique multi-hot, vulnerability multi-hot) per dialogue."""
    y = np.array([1 if d.manipulative else 0 for d in dialogues], dtype=np.int64)
    t = np.array([[x in d.techniques for x in TECHNIQUES] for d in dialogues], dtype=bool).reshape(-1, len(TECHNIQUES))
    v = np.array([[x in d.vulnerabilities for x in VULNERABILITIES] for d in dialogues], dtype=bool).reshape(
        -1, len(VULNERABILITIES)
    )
    return y, t, v


def label_decisions(scores: np.ndarray, ratio: float) -> np.ndarray:
    """Labels within `ratio` of each row's most likely label (so at least that one is always named)."""
    if not scores.shape[1]:
        return np.zeros(scores.shape, dtype=bool)
    return np.asarray(scores >= ratio * scores.max(axis=1, keepdims=True))


def evaluate_file(
    path: str | Path, *, artifact_dir: Path | None = None, show_progress: bool = False, sensitivity: str | None = None
) -> MentalManipReport:
    """The report on a CSV, with the live replay of its non-manipulative dialogues (window: `[monitor] window`)."""
    import dataclasses

    from guardian.config import settings
    from guardian.eval.replay import ReplayOptions, mentalmanip_live

    dialogues = load_mentalmanip(Path(path))
    detector = LocalModelDetector(artifact_dir=artifact_dir, sensitivity=sensitivity)
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


def run_train(*, data: Sequence[str] | None, out: str | None, seed: int, conversations: Sequence[str] | None = None,
              epochs: int | None = None, reply_pair: bool = True) -> str:
    """Train, save, and return a one-paragraph summary for the terminal."""
    import dataclasses
    import json

    from guardian.detectors.local.detector import cache_artifact_dir, forget_loaded_models
    from guardian.detectors.local.train import TrainConfig, train_and_save
    from guardian.progress import tqdm_progress

    config = TrainConfig(seed=seed, reply_pair=reply_pair)
    if epochs is not None:
        config = dataclasses.replace(config, epochs=epochs)
    directory = Path(out).expanduser() if out else cache_artifact_dir()
    model, metrics = train_and_save(
        directory,
        config=config,
        mentalmanip=training_files(data) or None,
        conversations=[Path(c).expanduser() for c in conversations] if conversations else None,
        progress=tqdm_progress("training local model"),
    )
    forget_loaded_models()
    return (
        f"trained on {model.info['n_train_bags']} bags ({model.info['n_turns']} turns, train part; "
        f"data sha256 {str(model.info['data_sha256'])[:12]}); artifact: {directory}; "
        f"thresholds {json.dumps(model.thresholds)}; dev: {json.dumps(metrics.get('dev_flagged_medium', {}))}"
    )
