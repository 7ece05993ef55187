"""Segmentation: the streaming VAD keeps Silero's state; the segmenter's cutting rules."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from guardian.audio.sources import decode_file
from guardian.audio.vad import SAMPLE_RATE, WINDOW, Segmenter, SileroStream, VadConfig
from guardian.eval.speech import SynthDialogue, read_wav

CLIP = Path(__file__).resolve().parent.parent / "data" / "speech" / "85514533_composed_mark_sassy.mp3"


class ScriptedVad:
    """Stand-in for SileroStream: one scripted probability per 512-sample window."""

    def __init__(self, probs: list[float]) -> None:
        self.probs = list(probs)
        self.pending = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        total = self.pending + len(samples)
        n, self.pending = divmod(total, WINDOW)
        out, self.probs = self.probs[:n], self.probs[n:]
        return np.array(out + [0.0] * (n - len(out)), dtype=np.float32)


def windows(seconds: float) -> int:
    return round(seconds * SAMPLE_RATE / WINDOW)


def run(probs: list[float], config: VadConfig, *, chunk: int = 1600) -> tuple[Segmenter, list]:
    audio = np.arange(len(probs) * WINDOW, dtype=np.float32)  # sample value = stream position
    segmenter = Segmenter(config, vad=ScriptedVad(probs))  # type: ignore[arg-type]
    out = []
    for i in range(0, len(audio), chunk):
        out.extend(segmenter.push(audio[i : i + chunk]))
    return segmenter, out


def test_an_utterance_ends_after_the_configured_silence() -> None:
    probs = [0.0] * windows(1) + [0.9] * windows(2) + [0.1] * windows(1.5)
    _, out = run(probs, VadConfig(silence_s=0.6, pad_s=0.2))
    assert len(out) == 1
    utt = out[0]
    assert utt.cut == "silence"
    assert utt.speech_end == pytest.approx(3.0, abs=0.04)
    assert utt.decided - utt.speech_end == pytest.approx(0.6, abs=0.04)
    assert utt.start == pytest.approx(0.8, abs=0.04)  # 0.2 s of pre-roll kept
    assert utt.end == pytest.approx(3.2, abs=0.04)
    # the samples are the stream's own samples at those times (nothing shifted or dropped)
    assert utt.samples[0] == pytest.approx(utt.start * SAMPLE_RATE, abs=1)
    assert len(utt.samples) == pytest.approx((utt.end - utt.start) * SAMPLE_RATE, abs=2)


def test_short_pauses_and_hysteresis_do_not_split_an_utterance() -> None:
    speech = [0.9] * windows(1)
    probs = [0.0] * 5 + speech + [0.1] * windows(0.4) + speech + [0.4] * windows(1.0) + speech + [0.0] * windows(1)
    _, out = run(probs, VadConfig(silence_s=0.6))
    assert len(out) == 1  # 0.4 s pause < 0.6 s; 0.4 lies between neg_threshold and threshold


def test_clicks_shorter_than_min_speech_are_dropped() -> None:
    probs = [0.0] * 10 + [0.9] * 3 + [0.0] * windows(1)
    _, out = run(probs, VadConfig(min_speech_s=0.25))
    assert out == []


def test_a_monologue_is_cut_at_max_length_at_its_last_pause() -> None:
    speech = [0.9] * windows(2.0)
    pause = [0.1] * windows(0.2)
    probs = [0.0] * 5 + (speech + pause) * 4 + [0.0] * windows(1)
    _, out = run(probs, VadConfig(max_utterance_s=5.0, silence_s=0.6))
    assert len(out) >= 2
    assert all(u.duration <= 5.0 + 0.5 for u in out)
    assert out[0].cut == "max_length"
    # cut inside a pause, not in the middle of speech
    first_pause_ends = [(5 + windows(2.0)) * WINDOW / SAMPLE_RATE, (5 + 2 * windows(2.0) + windows(0.2)) * WINDOW / SAMPLE_RATE]
    assert any(abs(out[0].speech_end - t) < 0.05 for t in first_pause_ends)
    covered = sum(u.speech_end - u.start for u in out)
    assert covered > 8.0  # nothing of the 8.8 s monologue is lost
    assert all(b.start >= a.end for a, b in itertools.pairwise(out))  # and nothing is said twice


def test_a_pauseless_monologue_is_hard_cut_without_repeating_audio() -> None:
    probs = [0.0] * 5 + [0.9] * windows(7.0) + [0.0] * windows(1)
    segmenter, out = run(probs, VadConfig(max_utterance_s=3.0))
    out += segmenter.flush()
    assert len(out) == 3
    assert all(b.start >= a.end for a, b in itertools.pairwise(out))
    assert sum(len(u.samples) for u in out) / SAMPLE_RATE == pytest.approx(7.0 + 0.2 + 0.2, abs=0.1)


def test_flush_returns_open_speech_at_end_of_stream() -> None:
    segmenter, out = run([0.0] * 5 + [0.9] * windows(1.5), VadConfig())
    assert out == []
    assert segmenter.speaking
    (last,) = segmenter.flush()
    assert last.cut == "end_of_stream"
    assert segmenter.flush() == []


@pytest.mark.slow
def test_streaming_vad_equals_a_whole_file_pass() -> None:
    """Chunked scoring with the state carried is bit-for-bit the whole-file pass."""
    from faster_whisper.vad import get_vad_model

    audio = decode_file(CLIP)[:, 0]
    audio = audio[: len(audio) // WINDOW * WINDOW]
    whole = get_vad_model()(audio).reshape(-1)
    stream = SileroStream()
    rng = np.random.default_rng(0)
    parts, i = [], 0
    while i < len(audio):
        step = int(rng.integers(100, 5000))  # odd chunk sizes, like a sound card's blocks
        parts.append(stream.process(audio[i : i + step]))
        i += step
    streamed = np.concatenate(parts)
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=1e-5)
    # and the naive way (a fresh state per chunk) does differ, which is why we keep it
    naive = np.concatenate([get_vad_model()(audio[j : j + 4096]).reshape(-1) for j in range(0, len(audio), 4096)])
    assert np.abs(naive - whole).max() > 0.05


@pytest.mark.slow
def test_segmenter_finds_each_turn_of_a_synthesised_dialogue(dialogue: SynthDialogue) -> None:
    audio = read_wav(dialogue.mono)[:, 0]
    segmenter = Segmenter(VadConfig(silence_s=0.6))
    out = []
    for i in range(0, len(audio), 1024):
        out.extend(segmenter.push(audio[i : i + 1024]))
    out.extend(segmenter.flush())
    assert len(out) == len(dialogue.turns)
    for utt, truth in zip(out, dialogue.turns, strict=True):
        assert utt.start == pytest.approx(truth.start, abs=0.35)
        assert utt.speech_end == pytest.approx(truth.end, abs=0.35)


@pytest.mark.slow
def test_silence_and_noise_give_no_utterance() -> None:
    rng = np.random.default_rng(1)
    audio = np.concatenate([np.zeros(SAMPLE_RATE * 2), rng.normal(0, 0.003, SAMPLE_RATE * 2)]).astype(np.float32)
    segmenter = Segmenter()
    assert segmenter.push(audio) == []
    assert segmenter.flush() == []


def test_provisional_utterance_is_exactly_the_later_cut() -> None:
    probs = [0.0] * 10 + [0.9] * windows(2) + [0.1] * windows(1)
    audio = np.arange(len(probs) * WINDOW, dtype=np.float32)
    segmenter = Segmenter(VadConfig(silence_s=0.5, pad_s=0.2), vad=ScriptedVad(probs))  # type: ignore[arg-type]
    guesses, cuts = [], []
    for i in range(0, len(audio), WINDOW):
        cuts.extend(segmenter.push(audio[i : i + WINDOW]))
        guess = segmenter.provisional(0.2)
        if guess is not None and not cuts:
            guesses.append(guess)
    assert guesses, "no provisional utterance during the hangover"
    (cut,) = cuts
    first = guesses[0]
    assert cut.decided - first.decided == pytest.approx(0.3, abs=0.04)  # 0.5 s hangover - 0.2 s
    assert (first.start, first.end, first.speech_end) == (cut.start, cut.end, cut.speech_end)
    np.testing.assert_array_equal(first.samples, cut.samples)
    assert segmenter.provisional(0.2) is None  # nothing open any more
