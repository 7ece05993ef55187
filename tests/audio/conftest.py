"""Audio fixtures: espeak-ng dialogues synthesised once per session, models loaded once.

Two clearly different espeak-ng voices (en-us+m3, en-gb+f3) with 1 s gaps: at
0.3 s gaps espeak's own sentence pauses are as long as the turn gaps, and a
speaker test would measure the VAD instead of the speaker encoder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from guardian.eval.speech import (
    EXAMPLE_DIALOGUE,
    EXAMPLE_VOICES,
    SynthDialogue,
    synthesize_dialogue,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "speech"

VOICES = EXAMPLE_VOICES
DIALOGUE = EXAMPLE_DIALOGUE


@pytest.fixture(scope="session")
def dialogue(tmp_path_factory: pytest.TempPathFactory) -> SynthDialogue:
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are needed to synthesise test speech (bash scripts/setup.sh)")
    return synthesize_dialogue(DIALOGUE, VOICES, tmp_path_factory.mktemp("speech"), gap_s=1.0)


@pytest.fixture(scope="session")
def short_dialogue(tmp_path_factory: pytest.TempPathFactory) -> SynthDialogue:
    """The first three turns (the second one holds a MentalManip key phrase): for CLI and TUI runs."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are needed to synthesise test speech (bash scripts/setup.sh)")
    return synthesize_dialogue(DIALOGUE[:3], VOICES, tmp_path_factory.mktemp("speech-short"), gap_s=1.0)


@pytest.fixture(scope="session")
def transcriber():  # type: ignore[no-untyped-def]
    from guardian.audio.transcribe import Transcriber

    model = Transcriber(cpu_threads=2)
    model.load()
    return model


@pytest.fixture(scope="session")
def speaker_encoder():  # type: ignore[no-untyped-def]
    from guardian.audio.speakers import SpeakerEncoder

    encoder = SpeakerEncoder()
    encoder.warm_up()
    return encoder
