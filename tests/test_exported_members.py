from __future__ import annotations

import guardian


def test_public_api_is_pinned() -> None:
    assert sorted(guardian.__all__) == [
        "Assessment",
        "Conversation",
        "DetectorError",
        "Evidence",
        "Finding",
        "Intent",
        "Turn",
        "__version__",
    ]
    for name in guardian.__all__:
        assert hasattr(guardian, name)


def test_import_sets_offline_environment() -> None:
    import os

    assert os.environ["ORT_DISABLE_TELEMETRY"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "1"
