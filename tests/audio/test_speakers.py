"""Speaker attribution: channel naming, online clustering rules, resemblyzer on real voices."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from guardian.audio.speakers import (
    ChannelSpeakers,
    EmbeddingSpeakers,
    OnlineClustering,
    _import_resemblyzer,
    _normed,
)
from guardian.eval.speech import SynthDialogue, read_wav


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_channels_name_speakers_in_order() -> None:
    speakers = ChannelSpeakers()
    assert speakers.attribute(np.zeros(10), channel=0) == "Speaker 1"
    assert speakers.attribute(np.zeros(10), channel=1) == "Speaker 2"
    assert ChannelSpeakers(names=("Agent", "Caller")).attribute(np.zeros(10), channel=1) == "Caller"


def test_clustering_opens_speakers_up_to_the_limit() -> None:
    a, b, c = unit(1, 0, 0), unit(0, 1, 0), unit(0, 0, 1)
    clustering = OnlineClustering(max_speakers=2, threshold=0.8)
    none = np.zeros((0, 3), dtype=np.float32)
    assert clustering.assign(a, none, duration=2) == "Speaker 1"
    assert clustering.assign(b, none, duration=2) == "Speaker 2"
    assert clustering.assign(unit(1, 0.1, 0), none, duration=2) == "Speaker 1"
    # a third voice cannot open a third speaker: it goes to the nearest one
    assert clustering.assign(unit(0.2, 1, 0.9), none, duration=2) == "Speaker 2"
    assert clustering.names == ["Speaker 1", "Speaker 2"]
    three = OnlineClustering(max_speakers=3, threshold=0.8)
    assert [three.assign(v, none, duration=2) for v in (a, b, c)] == ["Speaker 1", "Speaker 2", "Speaker 3"]


def test_a_short_utterance_never_opens_a_speaker() -> None:
    clustering = OnlineClustering(max_speakers=2, threshold=0.8, min_new_s=1.0)
    none = np.zeros((0, 3), dtype=np.float32)
    clustering.assign(unit(1, 0, 0), none, duration=2)
    assert clustering.assign(unit(0, 1, 0), none, duration=0.5) == "Speaker 1"
    assert clustering.names == ["Speaker 1"]


def test_a_mixed_utterance_does_not_move_the_centroid() -> None:
    none = np.zeros((0, 3), dtype=np.float32)
    clustering = OnlineClustering(max_speakers=2, threshold=0.8)
    a, b = unit(1, 0, 0), unit(0, 1, 0)
    clustering.assign(a, none, duration=2)
    clustering.assign(b, none, duration=2)
    before = clustering.speakers[0].centroid.copy()
    mixed_partials = np.stack([a, a, b])  # the other voice joins at the end
    assert clustering.assign(unit(1, 0.5, 0), mixed_partials, duration=3) == "Speaker 1"
    np.testing.assert_allclose(clustering.speakers[0].centroid, before)
    clustering.assign(unit(1, 0.5, 0), np.stack([a, a]), duration=3)  # one voice: it does move
    assert not np.allclose(clustering.speakers[0].centroid, before)


def test_names_stay_with_their_voices_as_clusters_are_recomputed() -> None:
    none = np.zeros((0, 3), dtype=np.float32)
    clustering = OnlineClustering(max_speakers=2, threshold=0.8)
    rng = np.random.default_rng(0)
    voice = {"x": unit(1, 0.2, 0), "y": unit(0.1, 1, 0.3)}
    said = []
    for who in "xyxxyyxyxy":
        said.append((who, clustering.assign(_normed(voice[who] + rng.normal(0, 0.05, 3)), none, duration=2)))
    assert {name for who, name in said if who == "x"} == {"Speaker 1"}
    assert {name for who, name in said if who == "y"} == {"Speaker 2"}


def test_one_speaker_needs_no_model() -> None:
    speakers = EmbeddingSpeakers(max_speakers=1)
    assert speakers.attribute(np.zeros(16000, dtype=np.float32), channel=0) == "Speaker 1"
    assert speakers.encoder._encoder is None


def test_resemblyzer_imports_without_leaving_a_fake_pkg_resources() -> None:
    module = _import_resemblyzer()
    assert hasattr(module, "VoiceEncoder")
    fake = sys.modules.get("pkg_resources")
    assert fake is None or hasattr(fake, "working_set")  # absent, or the real setuptools module


@pytest.mark.slow
def test_two_espeak_voices_are_told_apart(dialogue: SynthDialogue, speaker_encoder) -> None:  # type: ignore[no-untyped-def]
    """Ground-truth turn boundaries, so this measures the encoder + clustering alone."""
    audio = read_wav(dialogue.mono)[:, 0]
    speakers = EmbeddingSpeakers(encoder=speaker_encoder)
    named = [
        speakers.attribute(audio[int(t.start * 16000) : int(t.end * 16000)], channel=0) for t in dialogue.turns
    ]
    truth = [t.speaker for t in dialogue.turns]
    mapping = dict(zip(truth, named, strict=True))
    assert len(set(mapping.values())) == 2
    assert [mapping[t] for t in truth] == named


@pytest.mark.slow
def test_numpy_mel_spectrogram_equals_resemblyzers_librosa_one(dialogue: SynthDialogue) -> None:
    """We compute resemblyzer's mel spectrogram ourselves (librosa's first call is slow to import)."""
    from guardian.audio.speakers import mel_spectrogram

    audio = read_wav(dialogue.mono)[:, 0][16000:64000]
    expected = _import_resemblyzer().wav_to_mel_spectrogram(audio)
    got = mel_spectrogram(audio)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * float(expected.max()))
