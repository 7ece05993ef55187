"""The local manipulation model: determinism, verbatim evidence, artifact checks and rebuilds."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from guardian.config import settings
from guardian.conversation import Conversation
from guardian.detectors import local_artifact
from guardian.detectors.local import LocalModelDetector
from guardian.detectors.local_features import (
    FeatureConfig,
    TextFeaturizer,
    build_features,
    dialogue_text,
    embedding_features,
)
from guardian.detectors.local_train import TrainConfig, relative_decisions, train
from guardian.errors import ModelUnavailable
from guardian.eval.datasets import load_mentalmanip
from tests.detectors.local_data import write_subset

pytestmark = pytest.mark.slow

SMALL = TrainConfig(seed=3, inner_folds=2, features=FeatureConfig(max_word_features=5000, max_char_features=8000))


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Embedding caches written by training go to a temporary cache dir, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GUARDIAN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_subset(tmp_path_factory.mktemp("mm") / "subset.csv")


@pytest.fixture(scope="module")
def artifact(subset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("artifact") / "local_model"
    return local_artifact.build(data=[subset], out=out, config=SMALL)


def test_speakers_become_person_n_in_order_of_appearance() -> None:
    conv = Conversation.from_pairs([("Zoë", "Hi."), ("Bob", "Hello."), ("Zoë", "Bye.")])
    assert dialogue_text(conv) == "Person1: Hi.\nPerson2: Hello.\nPerson1: Bye."


def test_featurizer_round_trips_through_json_and_arrays() -> None:
    texts = ["Person1: you always do this", "Person2: I never said that", "Person1: you always lie"]
    fitted = TextFeaturizer(FeatureConfig(min_df=1)).fit(texts)
    meta, arrays = fitted.export()
    restored = TextFeaturizer.restore(json.loads(json.dumps(meta)), arrays)
    a, b = fitted.transform(texts).toarray(), restored.transform(texts).toarray()
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_extra_features_are_appended_for_ablations() -> None:
    conv = Conversation.from_pairs([("A", "you always do this")])
    featurizer = TextFeaturizer(FeatureConfig(min_df=1)).fit([dialogue_text(conv)])
    x = build_features([conv], featurizer=featurizer, extra=np.array([[0.5, 2.0]]))
    assert x.shape[1] == featurizer.n_features + 2
    with pytest.raises(ValueError, match="one row per conversation"):
        build_features([conv], featurizer=featurizer, extra=np.zeros((2, 1)))


def test_relative_decisions_keep_labels_near_the_top_one() -> None:
    p = np.array([[0.9, 0.6, 0.1], [0.2, 0.1, 0.15]])
    assert relative_decisions(p, 0.6).tolist() == [[True, True, False], [True, False, True]]
    assert relative_decisions(np.zeros((0, 3)), 0.6).shape == (0, 3)


class _LengthEncoder:
    """Stand-in with the encoder's interface: a 384-d vector from the text length (pooling test only)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([[float(len(t))] * 384 for t in texts], dtype=np.float32)


def test_embedding_features_pool_per_speaker() -> None:
    conv = Conversation.from_pairs([("B", "aa"), ("A", "a" * 9), ("B", "aaaaaa")])
    f = embedding_features([conv, Conversation()], encoder=_LengthEncoder())  # type: ignore[arg-type]
    assert f.shape == (2, 4 * 384)
    mean, top, first, second = (f[0, k * 384] for k in range(4))
    assert (mean, top, first, second) == pytest.approx((17 / 3, 9.0, 4.0, 9.0))  # B spoke first
    assert not f[1].any()


def test_training_is_deterministic_for_a_fixed_seed(subset: Path) -> None:
    dialogues = load_mentalmanip(subset)[::2]
    a, b = train(dialogues, config=SMALL), train(dialogues, config=SMALL)
    assert a.embedding is not None and b.embedding is not None
    np.testing.assert_array_equal(a.binary.coef, b.binary.coef)
    np.testing.assert_array_equal(a.techniques.coef, b.techniques.coef)
    np.testing.assert_array_equal(a.embedding.binary.coef, b.embedding.binary.coef)
    np.testing.assert_array_equal(a.binary_stacker.weights, b.binary_stacker.weights)
    assert (a.technique_ratio, a.vulnerability_ratio) == (b.technique_ratio, b.vulnerability_ratio)
    assert a.threshold == b.threshold


def test_artifact_round_trip_gives_the_same_predictions(subset: Path, artifact: Path) -> None:
    manifest = local_artifact.read_manifest(artifact)
    assert manifest["seed"] == 3
    assert len(manifest["data_sha256"]) == 64
    assert "scikit-learn" in manifest["versions"]
    model = local_artifact.load(artifact)
    conversations = [d.conversation for d in load_mentalmanip(subset)[:10]]
    again = local_artifact.load(artifact).predict(conversations)
    np.testing.assert_allclose(model.predict(conversations).probability, again.probability)


def test_every_reported_technique_quotes_the_manipulator_verbatim(artifact: Path) -> None:
    detector = LocalModelDetector(artifact_dir=artifact, threshold=0.0)  # flag everything: findings appear
    conv = Conversation.from_pairs(
        [
            ("Maya", "You said you'd pick me up at six. I waited an hour."),
            ("Daniel", "I never said that. You're overreacting, as usual. Don't be so stupid."),
            ("Maya", "You texted me this morning."),
            ("Daniel", "You always do this. If you leave, you'll regret it. Know your place."),
        ]
    )
    assessment = detector.analyze(conv)
    assert assessment.decision
    assert assessment.findings, "a flagged conversation names at least one technique"
    assert assessment.manipulator in conv.speakers
    assert set(assessment.techniques) and set(assessment.vulnerabilities)
    for finding in assessment.findings:
        assert finding.technique is not None
        assert finding.evidence
        assert finding.speaker == assessment.manipulator
        for ev in finding.evidence:
            turn = conv.turn(ev.turn)
            assert turn.text[ev.start : ev.end] == ev.quote
            assert turn.speaker == finding.speaker


def test_no_findings_below_the_threshold(artifact: Path) -> None:
    detector = LocalModelDetector(artifact_dir=artifact, threshold=1.0)
    assessment = detector.analyze(Conversation.from_pairs([("A", "Shall we have lunch?"), ("B", "Sure.")]))
    assert not assessment.decision
    assert assessment.findings == ()
    assert assessment.threshold == 1.0
    assert assessment.probability is not None


def test_window_keeps_conversation_turn_indices(artifact: Path) -> None:
    detector = LocalModelDetector(artifact_dir=artifact, threshold=0.0)
    conv = Conversation.from_pairs([("A", f"You never listen, turn {i}.") for i in range(15)])
    window = conv.window(10)
    assessment = detector.analyze(window)
    assert assessment.turn == 14
    assert all(ev.turn >= 5 for f in assessment.findings for ev in f.evidence)


def _corrupt(directory: Path) -> None:
    weights = directory / local_artifact.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))


def test_corrupt_artifact_is_detected_with_a_reason(artifact: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in artifact.iterdir():
        (broken / p.name).write_bytes(p.read_bytes())
    _corrupt(broken)
    with pytest.raises(local_artifact.ArtifactError, match="checksum"):
        local_artifact.load(broken)
    with pytest.raises(ModelUnavailable, match="guardian train"):
        LocalModelDetector(artifact_dir=broken).model()
    (broken / local_artifact.MANIFEST).write_text("{not json", encoding="utf-8")
    with pytest.raises(local_artifact.ArtifactError, match="not valid JSON"):
        local_artifact.load(broken)


def _small_training_data(root: Path) -> None:
    """GUARDIAN_TRAINING_DATA layout (mentalmanip/mentalmanip_{con,maj}.csv) with a subset."""
    write_subset(root / "mentalmanip" / "mentalmanip_con.csv", positives=30, negatives=20)
    write_subset(root / "mentalmanip" / "mentalmanip_maj.csv", positives=10, negatives=5, skip=30)


@pytest.mark.parametrize("state", ["missing", "corrupt"])
def test_missing_or_corrupt_artifact_is_rebuilt_with_a_message(
    state: str, artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _small_training_data(tmp_path / "data")
    monkeypatch.setenv("GUARDIAN_TRAINING_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(local_artifact, "TrainConfig", lambda: SMALL)  # the rebuild path, on a small budget
    target = tmp_path / "model"
    if state == "corrupt":
        target.mkdir()
        for p in artifact.iterdir():
            (target / p.name).write_bytes(p.read_bytes())
        _corrupt(target)
    monkeypatch.setenv("GUARDIAN_LOCAL__ARTIFACT_DIR", str(target))
    settings.cache_clear()
    loaded = local_artifact.load_or_build()
    err = capsys.readouterr().err
    assert loaded.rebuilt
    assert "rebuilding the local model" in err
    assert ("checksum" in err) if state == "corrupt" else ("no local model artifact" in err)
    manifest = local_artifact.read_manifest(target)
    assert (manifest["n_dialogues"], manifest["n_label_only_dialogues"]) == (50, 15)  # con; maj-only for labels
    assert LocalModelDetector().analyze(Conversation.from_pairs([("A", "You always lie.")])).probability is not None
    # the rebuilt artifact is now used as is
    assert not local_artifact.load_or_build().rebuilt


def test_stale_cache_falls_back_to_the_next_artifact(
    artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "cache" / "local_model"
    stale.mkdir(parents=True)
    for p in artifact.iterdir():
        (stale / p.name).write_bytes(p.read_bytes())
    manifest = json.loads((stale / local_artifact.MANIFEST).read_text(encoding="utf-8"))
    manifest["format_version"] = 0
    (stale / local_artifact.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    monkeypatch.setattr(local_artifact, "candidates", lambda: [stale, artifact])
    loaded = local_artifact.load_or_build()
    assert loaded.directory == artifact
    assert not loaded.rebuilt
    assert "another guardian version" in capsys.readouterr().err


def test_label_only_dialogues_never_touch_the_binary_head(subset: Path, tmp_path: Path) -> None:
    dialogues = load_mentalmanip(subset)
    extras = load_mentalmanip(write_subset(tmp_path / "extra.csv", positives=20, negatives=0, skip=70))
    config = TrainConfig(seed=3, inner_folds=2, embeddings=False, features=SMALL.features)
    plain = train(dialogues[::2], config=config)
    more = train(dialogues[::2], config=config, label_only=extras)
    np.testing.assert_array_equal(plain.binary.coef, more.binary.coef)
    assert plain.threshold == more.threshold
    assert not np.array_equal(plain.techniques.coef, more.techniques.coef)


def test_extra_features_hook_for_measuring_other_signals(subset: Path, tmp_path: Path) -> None:
    dialogues = load_mentalmanip(subset)[::2]
    config = TrainConfig(seed=3, inner_folds=2, embeddings=False, features=SMALL.features)
    signal = np.array([[float(d.manipulative), 1.0] for d in dialogues])  # a perfect extra signal
    model = train(dialogues, config=config, extra_features=signal)
    conversations = [d.conversation for d in dialogues]
    with pytest.raises(ValueError, match="extra features"):
        model.predict(conversations)
    pred = model.predict_inputs(*model.block_inputs(conversations, extra=signal))
    assert np.mean(pred.decision == signal[:, 0].astype(bool)) > 0.9
    with pytest.raises(ValueError, match="measurement only"):
        local_artifact.save(model, tmp_path / "nope")
    with pytest.raises(ValueError, match="one row per dialogue"):
        train(dialogues, config=config, extra_features=signal[:3])


def test_shipped_model_names_the_manipulator_and_quotes_him(gaslighting: Conversation) -> None:
    """The artifact in the package, on a conversation written for guardian (not from the training data)."""
    monkey = pytest.MonkeyPatch()
    monkey.setattr(local_artifact, "candidates", lambda: [local_artifact.shipped_artifact_dir()])
    try:
        detector = LocalModelDetector()
        flagged = detector.analyze(gaslighting)
        benign = detector.analyze(
            Conversation.from_pairs([("Ann", "Shall we get lunch at noon?"), ("Ben", "Sure, the usual place?")])
        )
    finally:
        monkey.undo()
    assert flagged.decision
    assert flagged.manipulator == "Daniel"
    assert {f.speaker for f in flagged.findings} == {"Daniel"}
    assert any(ev.quote == "I never said that." for f in flagged.findings for ev in f.evidence)
    assert not benign.decision
