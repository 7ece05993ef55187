"""`--engine ray`: the same screening on Ray Data, one machine or a cluster.

The archive becomes Ray datasets (`ray.data.from_items`, a chunk of the input at a
time so the driver's memory stays bounded), screened by `map_batches` with an
actor pool (`ActorPoolStrategy(size=workers)`; Ray 2.51 deprecated `concurrency=`
for it): each actor is a `RayScreener` that loads the detectors once and runs
`Screener.screen_batch`, the function the local engine runs. Order is preserved, so both engines write the same rows in the same order.
Ray Data restarts an actor that died and retries its batch. With no `--address` a local
Ray is started (and stopped at the end); `auto` or `ray://host:10001` joins a cluster,
whose nodes must have guardian installed.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from itertools import islice
from typing import Any

from guardian.bulk.inputs import Item
from guardian.bulk.local import EngineStats, peak_rss_mb
from guardian.bulk.rows import Screened
from guardian.bulk.screen import BATCH, Screener, ScreenOptions
from guardian.conversation import Conversation
from guardian.errors import GuardianError, ModelUnavailable

#: Conversations per Ray block: a task's output reaches the driver (and the results table) only when the
#: whole block is screened, so a block is one batch (measured: blocks of 32 arrived all at the end of a chunk).
BLOCK = BATCH
#: Conversations per dataset (the driver holds one chunk's items at a time), at least this many per worker.
CHUNK_PER_WORKER = 2_000
NEEDS_RAY = "the Ray engine needs Ray, which is not installed: pip install 'guardian[ray]'"


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise ModelUnavailable(NEEDS_RAY) from None
    return ray


def encode(item: Item) -> dict[str, str]:
    """An Item as plain strings (what a Ray block holds)."""
    return {
        "id": item.id,
        "label": item.label if item.label is not None else "",
        "has_label": "1" if item.label is not None else "",
        "error": item.error or "",
        "conversation": item.conversation.model_dump_json() if item.conversation is not None else "",
    }


def decode(row: dict[str, Any]) -> Item:
    conversation = Conversation.model_validate_json(row["conversation"]) if row["conversation"] else None
    return Item(
        str(row["id"]),
        conversation=conversation,
        label=str(row["label"]) if row["has_label"] else None,
        error=str(row["error"]) or None,
    )


class RayScreener:
    """The actor: detectors loaded once, one `screen_batch` per Ray batch."""

    options: dict[str, Any] = {}  # noqa: RUF012 - set on the subclass `screen_ray` builds

    def __init__(self) -> None:
        options = self.options
        self.screener = Screener(ScreenOptions(
            detectors=tuple(options["detectors"]), window=int(options["window"]), per_turn=bool(options["per_turn"]),
            encoder_precision=options.get("encoder_precision"),
        ))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        keys = list(batch)
        rows = [dict(zip(keys, values, strict=True)) for values in zip(*(batch[k] for k in keys), strict=True)]
        began = time.perf_counter()
        screened = self.screener.screen_batch([decode(r) for r in rows])
        busy = (time.perf_counter() - began) / max(len(screened), 1)
        return {
            "screened": np.array([s.model_dump_json() for s in screened], dtype=object),
            "rss_mb": np.full(len(screened), peak_rss_mb()),
            "busy_s": np.full(len(screened), busy),
        }


def screen_ray(
    items: Iterable[Item],
    *,
    options: ScreenOptions,
    workers: int,
    address: str | None,
    stats: EngineStats | None = None,
) -> Iterator[Screened]:
    """Screened conversations in input order from a pool of `workers` Ray actors."""
    ray = _ray()
    stats = stats if stats is not None else EngineStats()
    stats.workers = workers
    started = _connect(ray, address)
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False  # guardian draws its own bar
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        # The options travel with the class, not as constructor arguments in the object store
        # (Ray warns that those cannot be recovered when an actor is restarted).
        actor = type("RayScreener", (RayScreener,), {"options": asdict(options)})
        chunk = max(CHUNK_PER_WORKER * workers, 1)
        pending = iter(items)
        while True:
            part = [encode(i) for i in islice(pending, chunk)]
            if not part:
                return
            blocks = max(1, math.ceil(len(part) / BLOCK))
            dataset = ray.data.from_items(part, override_num_blocks=blocks).map_batches(
                actor,
                batch_size=BATCH,
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=1,
            )
            for batch in dataset.iter_batches(batch_size=BATCH, batch_format="numpy"):
                for text, rss, busy in zip(batch["screened"], batch["rss_mb"], batch["busy_s"], strict=True):
                    stats.saw_rss(float(rss))
                    stats.saw_work(1, float(busy))
                    yield Screened.model_validate_json(text)
    finally:
        if started:
            ray.shutdown()


def _connect(ray: Any, address: str | None) -> bool:
    """Join the cluster at `address`, or start a local Ray; True when this call started it."""
    if ray.is_initialized():
        return False
    import os

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline: no usage report
    # Ray's C++ core logs a line to the terminal for every Ray Data actor (its constructor arguments
    # live in the object store); only fatal ones are shown unless the user asks for more.
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=True,
            runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}} if address is None else None,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a local Ray"
        raise GuardianError(f"could not connect to Ray at {where} ({json.dumps(str(exc).splitlines()[0])})") from None
    return True
