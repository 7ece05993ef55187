"""Small MentalManip subsets for the local-model tests (training on them takes seconds)."""

from __future__ import annotations

import csv
from pathlib import Path

from guardian.corpora.datasets import mentalmanip_path

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


def write_conversations(path: Path, *, per_file: int = 12, skip: int = 0) -> Path:
    """`per_file` conversations of each data/conversations file (both labels of the calls) as one JSONL."""
    import json

    from guardian.corpora.conversations import conversations_dir

    lines: list[str] = []
    for source in sorted(conversations_dir().glob("*.jsonl")):
        rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        for label in sorted({r["label"] for r in rows}):
            chosen = [r for r in rows if r["label"] == label][skip : skip + per_file]
            lines += [json.dumps(r) for r in chosen]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
