"""Utterance segmentation: Silero VAD on a stream, with its recurrent state kept.

faster-whisper ships the Silero VAD v6 ONNX model and a helper that scores a
whole array; calling that helper once per incoming chunk restarts the LSTM state
(and the 64-sample context) at every chunk, which changed ~3% of frame decisions
in our measurements. `SileroStream` feeds the same ONNX session window by window
and carries h, c and the context across chunks, so a stream scored in pieces gives
exactly the probabilities of a whole-file pass (tests/audio/test_vad.py checks it).

`Segmenter` turns probabilities into utterances with the hysteresis of Silero's
own `get_speech_timestamps` (speech starts at `threshold`, silence is counted
below `neg_threshold`): an utterance ends after `silence_s` of silence (the
hangover a listener waits before answering; it trades end-of-utterance latency
against splitting a speaker's mid-sentence pauses) or is cut at
`max_utterance_s`, at the last pause of at least 100 ms if there was one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

SAMPLE_RATE = 16_000
WINDOW = 512  # Silero v6 at 16 kHz: 32 ms per probability
CONTEXT = 64

CutReason = Literal["silence", "max_length", "end_of_stream"]

_model_lock = threading.Lock()


def _silero_session() -> Any:
    """The ONNX session inside faster-whisper's cached VAD model (loaded once per process)."""
    with _model_lock:
        from faster_whisper.vad import get_vad_model

        return get_vad_model().session


class SileroStream:
    """Speech probability per 512-sample window of a stream, state carried across calls."""

    def __init__(self) -> None:
        self._session: Any = None
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Probabilities for every complete window; a remainder waits for the next call."""
        data = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        n = len(data) // WINDOW
        self._pending = data[n * WINDOW :].copy()
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        if self._session is None:
            self._session = _silero_session()
        windows = data[: n * WINDOW].reshape(n, WINDOW)
        contexts = np.concatenate([self._context[None, :], windows[:-1, -CONTEXT:]], axis=0)
        batch = np.ascontiguousarray(np.concatenate([contexts, windows], axis=1))
        probs, self._h, self._c = self._session.run(None, {"input": batch, "h": self._h, "c": self._c})
        self._context = windows[-1, -CONTEXT:].copy()
        return np.asarray(probs, dtype=np.float32).reshape(-1)


@dataclass(frozen=True)
class VadConfig:
    threshold: float = 0.5
    neg_threshold: float = 0.35
    silence_s: float = 0.5
    max_utterance_s: float = 20.0
    min_speech_s: float = 0.25
    pad_s: float = 0.2


@dataclass(frozen=True, eq=False)
class Utterance:
    """Speech between two pauses. Times are seconds from the start of the stream.

    `speech_end` is where the voice stopped; `decided` is when the segmenter knew
    (speech_end + the silence hangover for a silence cut): latency starts there.
    """

    samples: np.ndarray
    start: float
    end: float
    speech_end: float
    decided: float
    channel: int
    cut: CutReason

    @property
    def duration(self) -> float:
        return len(self.samples) / SAMPLE_RATE


class Segmenter:
    """Cuts one channel's stream into utterances; push samples in, utterances come out."""

    def __init__(self, config: VadConfig | None = None, *, channel: int = 0, vad: SileroStream | None = None) -> None:
        self.config = config or VadConfig()
        self.channel = channel
        self.vad = vad or SileroStream()
        self._audio = np.zeros(0, dtype=np.float32)
        self._offset = 0  # stream sample index of self._audio[0]
        self._position = 0  # stream samples scored so far
        self._triggered = False
        self._speech_start = 0
        self._silence_start: int | None = None
        self._pause: int | None = None  # start of the last >= 100 ms pause inside this utterance
        self._resume = 0  # where speech resumed after that pause
        self._pre_roll = int(self.config.pad_s * SAMPLE_RATE)  # audio kept before the speech start
        self.last_probability = 0.0

    @property
    def speaking(self) -> bool:
        return self._triggered

    def push(self, samples: np.ndarray) -> list[Utterance]:
        self._audio = np.concatenate([self._audio, samples.astype(np.float32, copy=False)])
        out: list[Utterance] = []
        cfg = self.config
        pad = int(cfg.pad_s * SAMPLE_RATE)
        silence = int(cfg.silence_s * SAMPLE_RATE)
        max_len = int(cfg.max_utterance_s * SAMPLE_RATE)
        short_pause = int(0.1 * SAMPLE_RATE)
        for prob in self.vad.process(samples):
            self.last_probability = float(prob)
            here = self._position
            self._position += WINDOW
            if prob >= cfg.threshold:
                if not self._triggered:
                    self._triggered = True
                    self._pre_roll = int(cfg.pad_s * SAMPLE_RATE)
                    self._speech_start = here
                    self._pause = None
                elif self._silence_start is not None and here - self._silence_start >= short_pause:
                    self._pause, self._resume = self._silence_start, here
                self._silence_start = None
            elif prob < cfg.neg_threshold and self._triggered:
                if self._silence_start is None:
                    self._silence_start = here
                if self._position - self._silence_start >= silence:
                    utt = self._cut(self._silence_start, self._silence_start + pad, "silence")
                    if utt is not None:
                        out.append(utt)
                    self._triggered = False
                    continue
            if self._triggered and self._position - self._speech_start >= max_len:
                out.extend(self._cut_long(pad))
            if not self._triggered:
                self._trim(self._position - pad)
        return out

    def flush(self) -> list[Utterance]:
        """End of stream: whatever speech is open becomes the last utterance."""
        if not self._triggered:
            return []
        self._triggered = False
        end = self._silence_start if self._silence_start is not None else self._position
        utt = self._cut(end, min(end + int(self.config.pad_s * SAMPLE_RATE), self._position), "end_of_stream")
        return [utt] if utt is not None else []

    def _cut_long(self, pad: int) -> list[Utterance]:
        """Max length reached: cut at the silence in progress, the last pause, or right here."""
        if self._silence_start is not None:
            utt = self._cut(self._silence_start, self._silence_start, "max_length")
            self._triggered = False
        elif self._pause is not None and self._pause > self._speech_start:
            pause, resume = self._pause, self._resume
            utt = self._cut(pause, pause, "max_length")
            self._triggered, self._speech_start = True, resume
            self._pre_roll = min(pad, resume - pause)  # never repeat audio of the previous piece
            self._trim(resume - pad)
        else:
            utt = self._cut(self._position, self._position, "max_length")
            self._triggered, self._speech_start = True, self._position
            self._pre_roll = 0
        self._pause = None
        return [utt] if utt is not None else []

    def provisional(self, after_s: float) -> Utterance | None:
        """The utterance a silence cut would give, once `after_s` of the silence has passed.

        Lets the pipeline start transcribing before the hangover is over; if the
        silence lasts, the final cut has exactly these samples (same start and end).
        """
        if not self._triggered or self._silence_start is None:
            return None
        pad = int(self.config.pad_s * SAMPLE_RATE)
        if self._position - self._silence_start < max(int(after_s * SAMPLE_RATE), pad):
            return None
        return self._make(self._silence_start, self._silence_start + pad, "silence")

    def _cut(self, speech_end: int, end: int, cut: CutReason) -> Utterance | None:
        utterance = self._make(speech_end, end, cut)
        self._silence_start = None
        return utterance

    def _make(self, speech_end: int, end: int, cut: CutReason) -> Utterance | None:
        start = max(self._offset, self._speech_start - self._pre_roll)
        end = min(end, self._offset + len(self._audio))
        if speech_end - self._speech_start < int(self.config.min_speech_s * SAMPLE_RATE):
            return None
        samples = self._audio[start - self._offset : end - self._offset].copy()
        return Utterance(
            samples=samples,
            start=start / SAMPLE_RATE,
            end=end / SAMPLE_RATE,
            speech_end=speech_end / SAMPLE_RATE,
            decided=self._position / SAMPLE_RATE,
            channel=self.channel,
            cut=cut,
        )

    def _trim(self, keep_from: int) -> None:
        drop = keep_from - self._offset
        if drop > 0:
            self._audio = self._audio[drop:]
            self._offset = keep_from
