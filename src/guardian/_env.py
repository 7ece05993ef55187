"""Process environment guardian needs before any heavy import.

onnxruntime (under chromadb and faster-whisper) looks up a telemetry host unless
ORT_DISABLE_TELEMETRY is set before it loads; Hugging Face libraries try the hub
unless told they are offline; torch uses one thread per call unless the
user says otherwise. Set once, as early as `import guardian`, and never
override a value the user set explicitly.
"""

from __future__ import annotations

import os

OFFLINE_DEFAULTS = {
    "ORT_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "TOKENIZERS_PARALLELISM": "false",
    # Per-turn work is one short utterance through MiniLM: a second intra-op thread buys
    # nothing, and on a busy 2-core machine torch's spinning threads made a turn 20x slower
    # (500 ms vs 30 ms measured, see docs/benchmarks.md). Whisper sets its own threads.
    "OMP_NUM_THREADS": "1",
}


def apply_offline_defaults() -> None:
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)
