"""Process settings guardian wants for its own work, applied when that work starts.

onnxruntime (under chromadb and the int8 intent model) looks up a telemetry host unless
ORT_DISABLE_TELEMETRY is set before it loads; Hugging Face libraries try the hub unless
told they are offline (guardian's models ship in Python packages, nothing is downloaded);
torch runs one OpenMP thread per core unless told otherwise, which on a busy 2-core machine
made a turn 20x slower (500 ms vs 30 ms, docs/benchmarks.md).

Why not at `import guardian` (where this used to run): a library must not change the
environment of the application that imports it (issue 20). The defaults are applied where
guardian itself starts work instead: the CLI entry point (`guardian.cli.main`), creating a
detector (`guardian.detectors.registry`), and every place that loads a model or a library
that reads these variables (the sentence encoder, the fine-tuned intent half, the example
store, Whisper, the speaker encoder). They must come before the heavy library is imported,
so each of those calls `apply_process_defaults()` first; an application that imported torch
or onnxruntime itself has already chosen, and keeps its choice.

A variable the user set is never overridden. `GUARDIAN_KEEP_THREAD_SETTINGS=1` leaves the
thread settings alone (an application that tunes its own threads); the offline and telemetry
settings are not tuning but guardian's promise that nothing leaves the machine, so they are
filled in at every start of work regardless (an application that wants the hub or telemetry
sets those variables itself, and keeps its value).
"""

from __future__ import annotations

import os

#: Set to 1 (or true/yes/on) to leave the thread settings (`THREAD_DEFAULTS`) as they are.
OPT_OUT = "GUARDIAN_KEEP_THREAD_SETTINGS"

#: Offline and no telemetry: applied at every start of work, opt-out or not.
PRIVACY_DEFAULTS = {
    "ORT_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "ANONYMIZED_TELEMETRY": "False",
}

#: Tuning an application may want to do itself (`OPT_OUT`).
THREAD_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "false",
    # Per-turn work is one short utterance through MiniLM: a second intra-op thread buys
    # nothing, and on a busy 2-core machine torch's spinning threads made a turn 20x slower
    # (500 ms vs 30 ms measured, see docs/benchmarks.md). Whisper sets its own threads.
    "OMP_NUM_THREADS": "1",
}

PROCESS_DEFAULTS = {**PRIVACY_DEFAULTS, **THREAD_DEFAULTS}


def opted_out() -> bool:
    """Whether the user asked guardian to leave its thread settings alone (`OPT_OUT`)."""
    return os.environ.get(OPT_OUT, "").strip().lower() in {"1", "true", "yes", "on"}


def apply_process_defaults() -> None:
    """Fill in the defaults the user has not set: `PRIVACY_DEFAULTS` always, `THREAD_DEFAULTS`
    unless opted out. Cheap and idempotent: called at every start of work, not once, because
    an application may load guardian's models long after importing it."""
    defaults = PRIVACY_DEFAULTS if opted_out() else PROCESS_DEFAULTS
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
