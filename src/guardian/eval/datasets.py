"""Moved to `guardian.corpora.datasets` (issue 20: training and the example store read the
corpora, and must not reach up into `eval`); kept so existing imports keep working."""

from guardian.corpora.datasets import (
    FACEACTS_COLUMNS,
    MENTALMANIP_COLUMNS,
    FaceActUtterance,
    LabelledDialogue,
    faceacts_path,
    file_sha256,
    key_phrases_path,
    load_faceacts,
    load_mentalmanip,
    mentalmanip_path,
)

__all__ = [
    "FACEACTS_COLUMNS",
    "MENTALMANIP_COLUMNS",
    "FaceActUtterance",
    "LabelledDialogue",
    "faceacts_path",
    "file_sha256",
    "key_phrases_path",
    "load_faceacts",
    "load_mentalmanip",
    "mentalmanip_path",
]
