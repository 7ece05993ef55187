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


def test_import_leaves_the_environment_unchanged() -> None:
    """A library must not change its host's environment (issue 20): importing guardian and the
    modules an application uses sets no OMP_NUM_THREADS, HF_HUB_OFFLINE, ... (a fresh
    interpreter: this one imported guardian long ago)."""
    import os
    import subprocess
    import sys

    from guardian._env import OPT_OUT, PROCESS_DEFAULTS

    env = {k: v for k, v in os.environ.items() if k not in PROCESS_DEFAULTS and k != OPT_OUT}
    code = (
        "import os; before = dict(os.environ)\n"
        "import guardian, guardian.analyze, guardian.monitor, guardian.agents\n"
        "changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))\n"
        "print(','.join(changed))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
