"""Metrics of MentalManip-style evaluation (binary detection + multi-label techniques/vulnerabilities).

As in the MentalManip paper (seed 000, Tables 5-7): accuracy, precision, recall
and macro-F1 of the binary decision over all dialogues; technique and
vulnerability micro/macro-F1 over the dialogues that carry such labels. Macro
averages run over the labels present in the reference (a label absent from a
small file would otherwise count as F1 = 0 whatever the model does). The numbers are
scikit-learn's (`sklearn.metrics`), imported when a metric is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from guardian.eval.replay import LiveMentalManip

#: The keys of `guardian eval mentalmanip --format json`, in order.
REPORT_KEYS = (
    "n",
    "accuracy",
    "precision",
    "recall",
    "macro_f1",
    "false_positive_rate",
    "technique_micro_f1",
    "technique_macro_f1",
    "vulnerability_micro_f1",
    "vulnerability_macro_f1",
    "latency_ms_p50",
)
#: Keys added when the report carries a live replay of the non-manipulative dialogues (the local model).
LIVE_KEYS = ("ever_flagged_fpr", "fpr_by_turns")


@dataclass(frozen=True, slots=True)
class BinaryMetrics:
    n: int
    accuracy: float
    precision: float
    recall: float
    macro_f1: float
    false_positive_rate: float


@dataclass(frozen=True, slots=True)
class MultiLabelMetrics:
    n: int
    micro_f1: float
    macro_f1: float
    per_label: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MentalManipReport:
    binary: BinaryMetrics
    techniques: MultiLabelMetrics
    vulnerabilities: MultiLabelMetrics
    latency_ms_p50: float
    #: Non-manipulative dialogues replayed turn by turn (`guardian.eval.replay.mentalmanip_live`).
    live: LiveMentalManip | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of `guardian eval mentalmanip --format json`: REPORT_KEYS, then LIVE_KEYS
        when the report has a live replay (`fpr_by_turns` maps a length bucket to its n and FPR)."""
        b = asdict(self.binary)
        out: dict[str, float | int] = {k: b[k] for k in REPORT_KEYS[:6]}
        out["technique_micro_f1"] = self.techniques.micro_f1
        out["technique_macro_f1"] = self.techniques.macro_f1
        out["vulnerability_micro_f1"] = self.vulnerabilities.micro_f1
        out["vulnerability_macro_f1"] = self.vulnerabilities.macro_f1
        out["latency_ms_p50"] = self.latency_ms_p50
        rounded: dict[str, Any] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}
        if self.live is not None:
            rounded.update(self.live.as_dict())
        return rounded


def binary_metrics(y_true: Sequence[bool] | np.ndarray, y_pred: Sequence[bool] | np.ndarray) -> BinaryMetrics:
    """Binary detection metrics; positives are manipulative dialogues (scikit-learn's, with 0
    where a ratio has nothing to count: no predicted positive, no negative dialogue, ...)."""
    from sklearn.metrics import (
        accuracy_score,
        confusion_matrix,
        f1_score,
        precision_score,
        recall_score,
    )

    t = np.asarray(y_true, dtype=bool).astype(int)
    p = np.asarray(y_pred, dtype=bool).astype(int)
    if t.shape != p.shape:
        raise ValueError("y_true and y_pred differ in length")
    n = len(t)
    if n == 0:
        return BinaryMetrics(n=0, accuracy=0.0, precision=0.0, recall=0.0, macro_f1=0.0, false_positive_rate=0.0)
    tn, fp = (int(c) for c in confusion_matrix(t, p, labels=[0, 1])[0])
    return BinaryMetrics(
        n=n,
        accuracy=float(accuracy_score(t, p)),
        precision=float(precision_score(t, p, zero_division=0)),
        recall=float(recall_score(t, p, zero_division=0)),
        macro_f1=float(f1_score(t, p, labels=[0, 1], average="macro", zero_division=0)),
        false_positive_rate=fp / (fp + tn) if fp + tn else 0.0,
    )


def multilabel_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, *, labels: Sequence[str] | None = None
) -> MultiLabelMetrics:
    """Micro/macro F1 over the rows that carry at least one reference label (scikit-learn's);
    the macro average and `per_label` cover only the labels present in the reference."""
    from sklearn.metrics import f1_score

    t = np.asarray(y_true, dtype=bool)
    p = np.asarray(y_pred, dtype=bool)
    if t.shape != p.shape:
        raise ValueError("y_true and y_pred differ in shape")
    if t.ndim != 2:
        raise ValueError("multi-label metrics need 2-D indicator matrices")
    rows, columns = t.any(axis=1), t.shape[1]
    # One more column, never true nor predicted: it changes no count, and keeps a one-label matrix
    # a multi-label one for scikit-learn (an (n, 1) array is read as a binary column).
    blank = np.zeros((int(rows.sum()), 1), dtype=int)
    t, p = np.hstack([t[rows], blank]).astype(int), np.hstack([p[rows], blank]).astype(int)
    names = list(labels) if labels is not None else [str(j) for j in range(columns)]
    present = [j for j in range(columns) if t[:, j].any()]
    if not present:
        return MultiLabelMetrics(n=0, micro_f1=0.0, macro_f1=0.0)
    per_column = f1_score(t, p, average=None, zero_division=0)
    return MultiLabelMetrics(
        n=int(rows.sum()),
        micro_f1=float(f1_score(t, p, average="micro", zero_division=0)),
        macro_f1=float(f1_score(t, p, labels=present, average="macro", zero_division=0)),
        per_label={names[j]: float(per_column[j]) for j in present},
    )


def render_text(report: MentalManipReport, *, title: str = "MentalManip") -> str:
    """A plain table laid out like the paper's Tables 5-7."""
    b = report.binary
    lines = [
        f"{title}: {b.n} dialogues",
        "",
        "Detection (Table 5)         Accuracy  Precision  Recall  Macro-F1  FPR",
        f"{'':28}{b.accuracy:8.3f}  {b.precision:9.3f}  {b.recall:6.3f}  {b.macro_f1:8.3f}  {b.false_positive_rate:.3f}",
        "",
    ]
    for name, m in (("Techniques (Table 6)", report.techniques), ("Vulnerabilities (Table 7)", report.vulnerabilities)):
        lines.append(f"{name:28}Micro-F1  Macro-F1  (over {m.n} labelled dialogues)")
        lines.append(f"{'':28}{m.micro_f1:8.3f}  {m.macro_f1:8.3f}")
        for label, f1 in m.per_label.items():
            lines.append(f"  {label:26}{f1:8.3f}")
        lines.append("")
    lines.append(f"Latency p50: {report.latency_ms_p50:.1f} ms per dialogue")
    if report.live is not None:
        live = report.live
        ever = "-" if live.ever_flagged_fpr is None else f"{live.ever_flagged_fpr:.3f}"
        lines.append("")
        lines.append(f"Live replay of the non-manipulative dialogues: flagged at any turn {ever}")
        lines.append("  FPR of the final decision by dialogue length (turns):")
        for bucket, cell in live.fpr_by_turns.items():
            fpr = cell["fpr"]
            lines.append(f"  {bucket:26}{'-' if fpr is None else format(fpr, '.3f'):>8}  (n={cell['n']})")
    return "\n".join(lines)
