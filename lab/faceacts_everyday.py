"""Build `data/faceacts/everyday.csv` from the drawn sample and the two labellers' files (issue 25).

Inputs: the sample of `lab/faceacts_sample.py` (item, source, conversation_id, turn, speaker,
previous, utterance), labeller A's and labeller B's `item,face_act` files (made independently,
neither saw the other's), and an adjudication file `item,face_act,note` for the items where they
disagree. `face_act` is A's label where A and B agree, the adjudicated one where they do not, and
A's label where B has not labelled the item (or the adjudication is missing): the `label_b` column
is then empty, so the state of the file says itself what was double-checked.
Prints Cohen's kappa and the confusion of A against B.
Usage: python lab/faceacts_everyday.py SAMPLE.csv LABELS_A.csv LABELS_B.csv ADJUDICATION.csv OUT.csv
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

ACTS = ["spos+", "spos-", "hpos+", "hpos-", "sneg+", "sneg-", "hneg+", "hneg-", "other"]
COLUMNS = ["conversation_id", "turn", "speaker", "utterance", "face_act", "source", "previous", "label_a",
           "label_b"]


def _labels(path: Path) -> dict[int, str]:
    if not path.is_file():
        return {}
    out: dict[int, str] = {}
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            act = row["face_act"].strip()
            if act not in ACTS:
                raise SystemExit(f"{path}: item {row['item']} has unknown face act {act!r}")
            out[int(row["item"])] = act
    return out


def kappa(a: list[str], b: list[str]) -> float:
    """Cohen's kappa of two label lists over the same items."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ACTS) / (n * n)
    return (observed - expected) / (1 - expected)


def main(sample: str, labels_a: str, labels_b: str, adjudication: str, out: str) -> None:
    with open(sample, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    a, b, adj = _labels(Path(labels_a)), _labels(Path(labels_b)), _labels(Path(adjudication))
    missing = [r["item"] for r in rows if int(r["item"]) not in a]
    if missing:
        raise SystemExit(f"labeller A has not labelled {len(missing)} items (first {missing[0]})")
    both = [int(r["item"]) for r in rows if int(r["item"]) in b]
    if both:
        la, lb = [a[i] for i in both], [b[i] for i in both]
        agree = sum(x == y for x, y in zip(la, lb, strict=True))
        print(f"{len(both)} items labelled twice: agreement {agree / len(both):.3f}, "
              f"Cohen's kappa {kappa(la, lb):.3f}; {len(both) - agree} disagreements, "
              f"{sum(1 for i in both if a[i] != b[i] and i in adj)} adjudicated")
        print("confusion (rows A, columns B):")
        print(f"{'':7}" + "".join(f"{x:>7}" for x in ACTS))
        pairs = Counter(zip(la, lb, strict=True))
        for x in ACTS:
            print(f"{x:7}" + "".join(f"{pairs[(x, y)]:>7}" for y in ACTS))
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            i = int(r["item"])
            final = a[i] if b.get(i, a[i]) == a[i] else adj.get(i, a[i])
            writer.writerow({"conversation_id": r["conversation_id"], "turn": r["turn"], "speaker": r["speaker"],
                             "utterance": r["utterance"], "face_act": final, "source": r["source"],
                             "previous": r["previous"], "label_a": a[i], "label_b": b.get(i, "")})
    print(f"{len(rows)} utterances -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:6])
