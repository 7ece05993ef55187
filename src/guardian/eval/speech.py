"""Speech evaluation: word error rate, speaker attribution, and espeak-ng dialogues.

Why here: the audio tests, `guardian bench --suite audio` and `lab/audio_sweep.py` must score the same way, and
the scoring must be honest about what it compares (normalised words, an explicit
alignment, the best one-to-one mapping of discovered speakers to true ones), so
it lives in one module instead of two copies.

Synthesis shells out to espeak-ng (a voice per speaker) and sox (resampling to
16 kHz mono); both are system packages installed by `scripts/setup.sh`.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guardian.errors import ModelUnavailable

SAMPLE_RATE = 16_000
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


_NUMBERS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]


def words(text: str) -> list[str]:
    """Lower-cased words without punctuation, small numbers spelled out: what WER compares.

    Whisper writes "6" where a reference says "six"; counting that as an error
    would measure formatting, not recognition.
    """
    text = text.lower().replace("’", "'").replace("–", " ").replace("-", " ")
    return [_NUMBERS[int(w)] if w.isdigit() and int(w) <= 20 else w for w in _WORD.findall(text)]


def _align(ref: Sequence[str], hyp: Sequence[str]) -> tuple[int, list[tuple[int | None, int | None]]]:
    """Levenshtein distance and the alignment (ref index, hyp index) pairs; None = gap."""
    n, m = len(ref), len(hyp)
    cost = np.zeros((n + 1, m + 1), dtype=np.int32)
    cost[:, 0] = np.arange(n + 1)
    cost[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            sub = cost[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1])
            cost[i, j] = min(sub, cost[i - 1, j] + 1, cost[i, j - 1] + 1)
    pairs: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i, j] == cost[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i, j] == cost[i - 1, j] + 1:
            pairs.append((i - 1, None))
            i -= 1
        else:
            pairs.append((None, j - 1))
            j -= 1
    pairs.reverse()
    return int(cost[n, m]), pairs


@dataclass(frozen=True)
class WerResult:
    errors: int
    reference_words: int

    @property
    def wer(self) -> float:
        return self.errors / max(1, self.reference_words)


def word_errors(reference: str, hypothesis: str) -> WerResult:
    """Word errors (substitutions + deletions + insertions) against the reference word count."""
    ref, hyp = words(reference), words(hypothesis)
    distance, _ = _align(ref, hyp)
    return WerResult(errors=distance, reference_words=len(ref))


def speaker_word_accuracy(
    reference: Sequence[tuple[str, str]], hypothesis: Sequence[tuple[str, str]]
) -> float:
    """Share of reference words aligned to a hypothesis word with the right speaker.

    Both sides are (speaker, text) turns. Hypothesis speaker names are arbitrary
    ("Speaker 1"), so every one-to-one mapping to reference names is tried and the
    best is scored (the usual diarisation convention). Deleted words count as wrong.
    """
    ref_words = [(spk, w) for spk, text in reference for w in words(text)]
    hyp_words = [(spk, w) for spk, text in hypothesis for w in words(text)]
    if not ref_words:
        return 1.0
    _, pairs = _align([w for _, w in ref_words], [w for _, w in hyp_words])
    matched = [(ref_words[i][0], hyp_words[j][0]) for i, j in pairs if i is not None and j is not None]
    ref_names = sorted({s for s, _ in ref_words})
    hyp_names = sorted({s for s, _ in hyp_words})
    best = 0
    k = max(len(ref_names), len(hyp_names))
    padded_ref = ref_names + [f"\0missing{i}" for i in range(k - len(ref_names))]
    for perm in itertools.permutations(padded_ref, len(hyp_names)):
        mapping = dict(zip(hyp_names, perm, strict=True))
        best = max(best, sum(1 for r, h in matched if mapping[h] == r))
    return best / len(ref_words)


# --- synthesis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpokenTurn:
    speaker: str
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class SynthDialogue:
    """A synthesised dialogue: the mono mix, a stereo file (one speaker per channel), the truth."""

    mono: Path
    stereo: Path
    turns: tuple[SpokenTurn, ...]
    duration: float


def require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise ModelUnavailable(
            f"speech synthesis needs {' and '.join(missing)}; install them with `bash scripts/setup.sh` "
            "or your package manager"
        )


def _speak(text: str, voice: str, path: Path, *, speed: int) -> np.ndarray:
    raw = path.with_suffix(".raw.wav")
    # The text goes in on stdin: a line like "-- He killed people --" on the command line
    # is read as options, and espeak-ng then writes no audio.
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(raw), "--stdin"],
        input=text.encode("utf-8"), check=True, capture_output=True,
    )
    subprocess.run(
        ["sox", str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(path)],
        check=True, capture_output=True,
    )
    raw.unlink()
    return read_wav(path)[:, 0]


def read_wav(path: Path) -> np.ndarray:
    """A 16-bit PCM wav as float32 (frames, channels)."""
    with wave.open(str(path), "rb") as wav:
        data = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
        return (data.astype(np.float32) / 32768.0).reshape(-1, wav.getnchannels())


def write_wav(path: Path, samples: np.ndarray) -> None:
    """Write float samples (frames,) or (frames, channels) as 16-bit PCM at 16 kHz."""
    frames = samples if samples.ndim == 2 else samples[:, None]
    pcm = (np.clip(frames, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(frames.shape[1])
        wav.setsampwidth(2)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(pcm.tobytes())


def synthesize_dialogue(
    turns: Sequence[tuple[str, str]],
    voices: dict[str, str],
    out_dir: Path,
    *,
    gap_s: float = 1.0,
    lead_s: float = 0.5,
    speed: int = 160,
    name: str = "dialogue",
) -> SynthDialogue:
    """Speak (speaker, text) turns with one espeak-ng voice per speaker, `gap_s` apart.

    Writes `<name>.wav` (mono mix) and `<name>_stereo.wav` (channel i = the i-th
    speaker of `voices`) and returns the true turn times.
    """
    require_tools()
    out_dir.mkdir(parents=True, exist_ok=True)
    channel = {speaker: i for i, speaker in enumerate(voices)}
    pieces: list[tuple[str, np.ndarray]] = []
    for i, (speaker, text) in enumerate(turns):
        pieces.append((speaker, _speak(text, voices[speaker], out_dir / f"{name}_{i:03d}.wav", speed=speed)))
    gap = int(gap_s * SAMPLE_RATE)
    total = int(lead_s * SAMPLE_RATE) + sum(len(p) for _, p in pieces) + gap * len(pieces)
    stereo = np.zeros((total, len(voices)), dtype=np.float32)
    spoken: list[SpokenTurn] = []
    cursor = int(lead_s * SAMPLE_RATE)
    for (speaker, audio), (_, text) in zip(pieces, turns, strict=True):
        stereo[cursor : cursor + len(audio), channel[speaker]] = audio
        spoken.append(SpokenTurn(speaker, text, cursor / SAMPLE_RATE, (cursor + len(audio)) / SAMPLE_RATE))
        cursor += len(audio) + gap
    for i in range(len(pieces)):
        (out_dir / f"{name}_{i:03d}.wav").unlink()
    mono_path, stereo_path = out_dir / f"{name}.wav", out_dir / f"{name}_stereo.wav"
    write_wav(mono_path, stereo.sum(axis=1))
    write_wav(stereo_path, stereo)
    return SynthDialogue(mono=mono_path, stereo=stereo_path, turns=tuple(spoken), duration=total / SAMPLE_RATE)


#: A two-voice dialogue (from examples/gaslighting.txt) that tests and `guardian bench` speak with espeak-ng.
EXAMPLE_DIALOGUE: tuple[tuple[str, str], ...] = (
    ("Maya", "You said you would pick me up at six. I waited for an hour in the rain."),
    ("Daniel", "I never said that. You are overreacting, as usual."),
    ("Maya", "You texted me this morning, I can show you the message."),
    ("Daniel", "Honestly, nobody else would put up with you. Know your place."),
    ("Maya", "That is not fair."),
    ("Daniel", "If you really loved me, you would stop checking my phone."),
)
#: Two clearly different espeak-ng voices, one per speaker of EXAMPLE_DIALOGUE.
EXAMPLE_VOICES = {"Maya": "en-us+m3", "Daniel": "en-gb+f3"}
