"""Build `data/faceacts/everyday.csv` from the drawn sample and the two labellers' files (issue 25).

Inputs: the sample of `lab/faceacts_sample.py` (item, source, conversation_id, turn, speaker,
previous, utterance), labeller A's and labeller B's `item,face_act` files (made independently,
neither saw the other's), and an adjudication file `item,face_act,note` for the items where they
disagree. `face_act` is A's label where A and B agree, the adjudicated one where they do not, and
A's label where B has not labelled the item (or the adjudication is missing): the `label_b` column
is then empty, so the state of the file says itself what was double-checked.
Prints Cohen's kappa and the confusion of A against B.

Rounds: each drawing of `lab/faceacts_sample.py --round N` numbers its items from 0, so the
adjudication file may carry a `round` column (rows without one are round 1) and only the rows of
`--round N` are read. With `--round N` > 1 the rows already in OUT from other rounds are kept (a
missing `round` is 1), those of round N are replaced by the new ones, and every row says its round.
`--disagreements FILE` writes the items A and B disagree on (with context) for the adjudicator.
Usage: python lab/faceacts_everyday.py SAMPLE.csv LABELS_A.csv LABELS_B.csv ADJUDICATION.csv OUT.csv
       [--round N] [--disagreements FILE]
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

ACTS = ["spos+", "spos-", "hpos+", "hpos-", "sneg+", "sneg-", "hneg+", "hneg-", "other"]
COLUMNS = ["conversation_id", "turn", "speaker", "utterance", "face_act", "source", "previous", "label_a",
           "label_b", "round"]


def _labels(path: Path, round_: int | None = None) -> dict[int, str]:
    """item -> act; with `round_`, only the rows of that round (a row without a `round` is round 1)."""
    if not path.is_file():
        return {}
    out: dict[int, str] = {}
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if round_ is not None and int(row.get("round") or 1) != round_:
                continue
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


def main(sample: str, labels_a: str, labels_b: str, adjudication: str, out: str, *, round_: int = 1,
         disagreements: str | None = None) -> None:
    with open(sample, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    a, b, adj = _labels(Path(labels_a)), _labels(Path(labels_b)), _labels(Path(adjudication), round_)
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
    if disagreements:
        with open(disagreements, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["item", "source", "previous", "utterance", "label_a", "label_b"])
            writer.writeheader()
            for r in rows:
                i = int(r["item"])
                if i in b and a[i] != b[i]:
                    writer.writerow({"item": i, "source": r["source"], "previous": r["previous"],
                                     "utterance": r["utterance"], "label_a": a[i], "label_b": b[i]})
        print(f"disagreements -> {disagreements}")
    kept: list[dict[str, str]] = []
    if round_ > 1 and Path(out).is_file():
        with open(out, encoding="utf-8") as f:
            kept = [{**r, "round": r.get("round") or "1"} for r in csv.DictReader(f)
                    if int(r.get("round") or 1) != round_]
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(kept)
        for r in rows:
            i = int(r["item"])
            final = a[i] if b.get(i, a[i]) == a[i] else adj.get(i, a[i])
            writer.writerow({"conversation_id": r["conversation_id"], "turn": r["turn"], "speaker": r["speaker"],
                             "utterance": r["utterance"], "face_act": final, "source": r["source"],
                             "previous": r["previous"], "label_a": a[i], "label_b": b.get(i, ""),
                             "round": round_})
    print(f"{len(rows)} utterances of round {round_} (+ {len(kept)} of earlier rounds) -> {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    options = {"--round": "1", "--disagreements": ""}
    for name in options:
        if name in args:
            k = args.index(name)
            options[name] = args[k + 1]
            del args[k:k + 2]
    if len(args) != 5:
        raise SystemExit(__doc__)
    main(*args, round_=int(options["--round"]), disagreements=options["--disagreements"] or None)
