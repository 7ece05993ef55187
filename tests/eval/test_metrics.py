"""MentalManip metrics, checked against hand-computed confusion counts."""

from __future__ import annotations

import numpy as np
import pytest

from guardian.eval.metrics import (
    REPORT_KEYS,
    MentalManipReport,
    binary_metrics,
    multilabel_metrics,
    render_text,
)


def test_binary_metrics_from_confusion_counts() -> None:
    # tp=2 fp=1 fn=1 tn=2
    m = binary_metrics([1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0])
    assert m.n == 6
    assert m.accuracy == pytest.approx(4 / 6)
    assert m.precision == pytest.approx(2 / 3)
    assert m.recall == pytest.approx(2 / 3)
    assert m.false_positive_rate == pytest.approx(1 / 3)
    assert m.macro_f1 == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_binary_metrics_degenerate_cases_do_not_divide_by_zero() -> None:
    m = binary_metrics([0, 0], [0, 0])
    assert m.accuracy == 1.0
    assert m.precision == 0.0
    assert m.false_positive_rate == 0.0
    with pytest.raises(ValueError, match="length"):
        binary_metrics([1], [1, 0])


def test_multilabel_only_rows_with_reference_labels_count() -> None:
    truth = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]])
    pred = np.array([[1, 1, 0], [0, 1, 0], [1, 1, 1]])  # the unlabelled third row is ignored
    m = multilabel_metrics(truth, pred, labels=["a", "b", "c"])
    assert m.n == 2
    # tp=2 fp=1 fn=0 -> micro 4/5; per label a=1, b=2/3 (c absent from the reference: not averaged)
    assert m.micro_f1 == pytest.approx(0.8)
    assert m.per_label == pytest.approx({"a": 1.0, "b": 2 / 3})
    assert m.macro_f1 == pytest.approx(5 / 6)


def test_report_json_has_exactly_the_documented_keys() -> None:
    report = MentalManipReport(
        binary=binary_metrics([1, 0], [1, 1]),
        techniques=multilabel_metrics(np.array([[1, 0]]), np.array([[1, 0]])),
        vulnerabilities=multilabel_metrics(np.array([[0, 1]]), np.array([[1, 0]])),
        latency_ms_p50=1.23456,
    )
    out = report.as_dict()
    assert tuple(out) == REPORT_KEYS
    assert out["false_positive_rate"] == 1.0
    assert out["vulnerability_micro_f1"] == 0.0
    assert out["latency_ms_p50"] == 1.2346
    text = render_text(report)
    assert "Macro-F1" in text
    assert "Latency p50" in text


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0


@pytest.mark.parametrize("seed", range(20))
def test_scikit_learn_gives_the_numbers_of_the_confusion_counts(seed: int) -> None:
    """The metrics come from sklearn.metrics; they must equal the formulas on the counts
    (what the hand-written metrics computed), also for one label and for empty inputs."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 25))
    t, p = rng.random(n) < rng.random(), rng.random(n) < rng.random()
    tp, fp, fn, tn = (int(np.sum(a & b)) for a, b in ((t, p), (~t, p), (t, ~p), (~t, ~p)))
    m = binary_metrics(t, p)
    assert m.accuracy == pytest.approx((tp + tn) / n if n else 0.0)
    assert m.precision == pytest.approx(tp / (tp + fp) if tp + fp else 0.0)
    assert m.recall == pytest.approx(tp / (tp + fn) if tp + fn else 0.0)
    assert m.macro_f1 == pytest.approx((_f1(tp, fp, fn) + _f1(tn, fn, fp)) / 2 if n else 0.0)
    assert m.false_positive_rate == pytest.approx(fp / (fp + tn) if fp + tn else 0.0)

    k = 1 + seed % 4  # one label too: scikit-learn reads an (n, 1) array as binary unless told
    truth = rng.random((n, k)) < 0.3
    pred = rng.random((n, k)) < 0.5
    rows = truth.any(axis=1)
    tr, pr = truth[rows], pred[rows]
    counts = [(int(np.sum(tr[:, j] & pr[:, j])), int(np.sum(~tr[:, j] & pr[:, j])), int(np.sum(tr[:, j] & ~pr[:, j])))
              for j in range(k)]
    present = [j for j in range(k) if tr[:, j].any()]
    ml = multilabel_metrics(truth, pred)
    assert ml.n == int(rows.sum())
    assert ml.per_label == pytest.approx({str(j): _f1(*counts[j]) for j in present})
    assert ml.micro_f1 == pytest.approx(_f1(*(sum(c[i] for c in counts) for i in range(3))) if present else 0.0)
    assert ml.macro_f1 == pytest.approx(float(np.mean([_f1(*counts[j]) for j in present])) if present else 0.0)
