"""Train the turn model into a folder and print its dev metrics (what `guardian train` does, with knobs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from guardian.detectors.local.train import TrainConfig, log, train_and_save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], help="config field=value, e.g. epochs=20")
    args = parser.parse_args()
    config = TrainConfig()
    for item in args.set:
        key, value = item.split("=", 1)
        kind = type(getattr(config, key))
        config = dataclasses.replace(config, **{key: value in ("1", "true") if kind is bool else kind(value)})

    def progress(step: str, done: int, total: int) -> None:
        if step.startswith("epoch") or done == total:
            log(f"{step} ({done}/{total})")

    _, metrics = train_and_save(args.out, config=config, progress=progress)
    print(json.dumps(metrics, indent=1))


if __name__ == "__main__":
    main()
