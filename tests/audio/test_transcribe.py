"""Transcription: model resolution errors, and the bundled tiny.en on real speech."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.audio.sources import decode_file
from guardian.audio.transcribe import Transcriber, default_model_path, resolve_model
from guardian.errors import ModelUnavailable
from guardian.eval.speech import word_errors

DATA = Path(__file__).resolve().parent.parent / "data" / "speech"


def test_default_model_is_the_packaged_tiny_en() -> None:
    path = default_model_path()
    assert (path / "model.bin").is_file()
    assert resolve_model(None) == str(path)


def test_a_missing_model_directory_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"does not exist; fix audio\.whisper_model"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match=r"has no model\.bin"):
        resolve_model(str(tmp_path))


def test_a_model_name_that_is_not_cached_fails_offline_with_advice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelUnavailable, match=r"could not be loaded offline.*local CTranslate2"):
        Transcriber("large-v3").load()


@pytest.mark.slow
def test_a_turn_of_a_real_clip_is_transcribed(transcriber: Transcriber) -> None:
    audio = decode_file(DATA / "85514533_composed_mark_sassy.mp3")[:, 0]
    turn = audio[int(26.0 * 16000) : int(31.1 * 16000)]
    result = transcriber.transcribe(turn)
    reference = "Just as she starts feeling awful, you come up from behind and touch her neck."
    assert word_errors(reference, result.text).wer <= 0.1
    assert result.compute_s > 0


@pytest.mark.slow
def test_silence_gives_no_text(transcriber: Transcriber) -> None:
    import numpy as np

    assert transcriber.transcribe(np.zeros(16000, dtype=np.float32)).text == ""


def test_fitted_window_sizes() -> None:
    from guardian.audio.transcribe import fitted_frames

    assert fitted_frames(100) == 1500  # 1 s of speech: a 15 s window, never less
    assert fitted_frames(900) == 2000  # 9 s: twice its length, rounded up to 5 s steps
    assert fitted_frames(2900) == 3000  # never more than Whisper's 30 s


def test_stutter_detector() -> None:
    from guardian.audio.transcribe import _stutters

    assert _stutters("Howdy, howdy, howdy? Howdy?")
    assert not _stutters("Howdy, Pouty. No, no, I said no.")


@pytest.mark.slow
def test_fitted_window_matches_the_full_window_on_real_speech(transcriber: Transcriber) -> None:
    """The fitted encoder window is a speed-up only: same words as Whisper's standard 30 s window."""
    audio = decode_file(DATA / "85514499_composed_amanda_mark.mp3")[:, 0]
    turn = audio[: int(8.0 * 16000)]
    full = Transcriber(cpu_threads=2, fitted_window=False)
    fitted_text = transcriber.transcribe(turn).text
    full_text = full.transcribe(turn).text
    assert fitted_text
    assert word_errors(full_text, fitted_text).wer <= 0.1


@pytest.mark.slow
def test_a_backend_that_refuses_short_windows_falls_back_to_the_standard_one(
    transcriber: Transcriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some CTranslate2 builds insist on 3000 frames: the utterance is still transcribed, and later ones go straight there."""
    import numpy as np

    local = Transcriber(cpu_threads=2)
    monkeypatch.setattr(local, "load", lambda: transcriber.load())

    def refuse(*_: object) -> None:
        raise ValueError("Invalid input features shape: expected an input with shape (1, 80, 3000)")

    monkeypatch.setattr(local, "_fitted", refuse)
    audio = decode_file(DATA / "85514499_composed_amanda_mark.mp3")[:, 0][: int(8.0 * 16000)]
    assert local.transcribe(audio.astype(np.float32)).text
    assert local.fitted_window is False
