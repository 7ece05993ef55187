"""The window label head: its fit (training side) and its run-time product agree, and the fit learns."""

from __future__ import annotations

import dataclasses

import numpy as np

from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import Bag, TrainingSet
from guardian.detectors.local.labels import bag_features, fit_label_head, fit_multilabel
from guardian.detectors.local.model import (
    MANIP,
    OUTPUTS,
    TurnModel,
    window_label_logits,
    window_pool,
)

FEATURES, HIDDEN = 24, 8


def small_model(seed: int = 0) -> TurnModel:
    rng = np.random.default_rng(seed)
    return TurnModel(
        w1=rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32), b1=np.zeros(HIDDEN, np.float32),
        w2=rng.normal(size=(HIDDEN, OUTPUTS)).astype(np.float32), b2=np.zeros(OUTPUTS, np.float32),
        manip_platt=(1.0, 0.0), scam_platt=(1.0, 0.0), thresholds={"low": 0.9, "medium": 0.8, "high": 0.5},
        scam_threshold=0.8,
    )


def test_fit_multilabel_learns_a_planted_signal_and_is_deterministic() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 6)).astype(np.float32) * 3 + 5  # raw scale: the fit standardises and folds back
    y = np.stack([x[:, 0] > 5, x[:, 1] + x[:, 2] > 10], axis=1).astype(np.float32)
    w, b = fit_multilabel(x[:300], y[:300], l2=0.1)
    again = fit_multilabel(x[:300], y[:300], l2=0.1)
    assert np.array_equal(w, again[0]) and np.array_equal(b, again[1])
    held_out = (x[300:] @ w + b > 0) == y[300:].astype(bool)
    assert held_out.mean(axis=0).min() > 0.9, held_out.mean(axis=0)


def test_class_weights_make_a_rare_label_named_more_often() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    y = ((x[:, :1] + rng.normal(size=(300, 1)) * 1.5) > 2.0).astype(np.float32)  # rare and noisy
    w, b = fit_multilabel(x, y, l2=1.0)
    wp, bp = fit_multilabel(x, y, l2=1.0, pos_weight=np.array([5.0]))
    assert int((x @ wp + bp > 0).sum()) > int((x @ w + b > 0).sum())


def test_run_time_labels_are_the_fitted_product_of_pool_and_turn() -> None:
    """`window_label_logits` (run time) reads what `bag_features` (training) builds, turn by turn."""
    model = small_model()
    rng = np.random.default_rng(3)
    model.label_w = rng.normal(size=(3 * HIDDEN, 16)).astype(np.float32)
    model.label_b = rng.normal(size=16).astype(np.float32)
    x = rng.normal(size=(5, FEATURES)).astype(np.float32)
    hidden = model.hidden(x)
    z = (hidden @ model.w2 + model.b2)[:, MANIP]
    got = window_label_logits(model, hidden, z)
    for i in range(len(x)):
        expected = np.concatenate([window_pool(hidden, z), hidden[i]]) @ model.label_w + model.label_b
        np.testing.assert_allclose(got[i], expected, rtol=1e-4, atol=1e-4)
    # At the top turn it is exactly what training saw for the bag.
    top = int(np.argmax(z))
    bag = Bag(rows=np.arange(5), source="mentalmanip", conversation_id="d", manipulative=1.0)
    seen = bag_features(model, x, [bag])[0] @ model.label_w + model.label_b
    np.testing.assert_allclose(got[top], seen, rtol=1e-4, atol=1e-4)


def test_fit_label_head_learns_dialogue_labels_and_leaves_the_decision_heads() -> None:
    rng = np.random.default_rng(4)
    model = small_model()
    before = dataclasses.replace(model)
    bags, chunks, offset = [], [], 0
    for n in range(240):
        turns = int(rng.integers(2, 7))
        x = rng.normal(size=(turns, FEATURES)).astype(np.float32)
        technique = n % 2  # technique 0 or 1, carried by the dialogue's words (here: its first feature)
        x[:, 0] += 3.0 if technique else -3.0
        tech = np.zeros(11, np.float32)
        tech[technique] = 1
        vuln = np.zeros(5, np.float32)
        vuln[technique] = 1
        chunks.append(x)
        bags.append(Bag(rows=np.arange(offset, offset + turns), source="mentalmanip", conversation_id=str(n),
                        manipulative=1.0, techniques=tech, vulnerabilities=vuln))
        offset += turns
    features = np.vstack(chunks)
    corpus = Corpus(data=TrainingSet(features=features, bags=bags), train=bags[:200], dev=bags[200:])
    fitted = fit_label_head(model, corpus, l2=0.1)
    assert fitted == {"technique_dialogues": 200, "vulnerability_dialogues": 200}
    assert model.label_w is not None and model.label_w.shape == (3 * HIDDEN, 16)
    for name in ("w1", "b1", "w2", "b2"):
        assert np.array_equal(getattr(model, name), getattr(before, name))
    right = 0
    for b in corpus.dev:
        scores = model.score(features[b.rows])
        top = int(np.argmax(scores.logits))
        right += int(np.argmax(scores.techniques[top])) == int(np.argmax(b.techniques))
    assert right >= 0.8 * len(corpus.dev)  # chance: one half


def test_a_corpus_without_labels_keeps_the_per_turn_heads() -> None:
    model = small_model()
    bag = Bag(rows=np.arange(3), source="dailydialog", conversation_id="c", manipulative=0.0)
    corpus = Corpus(data=TrainingSet(features=np.zeros((3, FEATURES), np.float32), bags=[bag]), train=[bag], dev=[])
    assert fit_label_head(model, corpus, l2=0.1) == {}
    assert model.label_w is None


def test_repeated_rows_score_as_their_first_copy() -> None:
    """Overlapping windows repeat rows; the hidden layer runs once per distinct row and the copies
    score as the row scored alone. Up to float32 rounding, not bit for bit: BLAS may sum a product's
    terms in another order for another number of rows (on the 2026-11-26 host a 2-row and a 5-row
    product differed in the 7th digit), so that is all a row can promise here; the rows the engines
    write are compared exactly in tests/bulk."""
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(5, FEATURES)).astype(np.float32)
    model = small_model()
    windows = [rows[:2], rows[:3], rows[1:5]]  # as a conversation's windows overlap
    together = model.score(np.vstack(windows), windows=[len(w) for w in windows])
    at = 0
    for w in windows:
        alone = model.score(w)
        part = slice(at, at + len(w))
        at += len(w)
        for name in ("manipulation", "scam", "techniques", "vulnerabilities"):
            np.testing.assert_allclose(getattr(together, name)[part], getattr(alone, name), rtol=1e-5, atol=1e-6)
