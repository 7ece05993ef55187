"""Small MentalManip subsets for the local-model tests (training on them takes seconds)."""

from __future__ import annotations

import csv
from pathlib import Path

from guardian.eval.datasets import mentalmanip_path

COLUMNS = ("ID", "Dialogue", "Manipulative", "Technique", "Vulnerability")


def write_subset(path: Path, *, positives: int = 70, negatives: int = 40, skip: int = 0) -> Path:
    """The first `positives` manipulative and `negatives` other dialogues of con (after `skip` of each)."""
    rows = list(csv.DictReader(mentalmanip_path("con").read_text(encoding="utf-8").splitlines(keepends=True)))
    pos = [r for r in rows if r["Manipulative"] == "1"][skip : skip + positives]
    neg = [r for r in rows if r["Manipulative"] == "0"][skip : skip + negatives]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in pos + neg:
            writer.writerow({k: r[k] for k in COLUMNS})
    return path
