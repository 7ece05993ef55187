"""A worker's reported peak memory is its own, not its parent's (Linux keeps ru_maxrss across execve)."""

from __future__ import annotations

import multiprocessing
import sys

import pytest

from guardian.bulk.local import peak_rss_mb


def _report(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(peak_rss_mb())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_spawned_worker_does_not_inherit_the_parents_peak() -> None:
    ballast = bytearray(400 * 1024 * 1024)
    ballast[:: 4096] = b"\x01" * len(range(0, len(ballast), 4096))  # touch every page: resident
    parent = peak_rss_mb()
    assert parent >= 400
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=_report, args=(queue,))
    worker.start()
    child = queue.get(timeout=60)
    worker.join(timeout=60)
    del ballast
    assert child < parent - 300, (child, parent)
