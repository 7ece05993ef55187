"""Draw the utterances for the everyday face-act set (issue 25).

Whole conversations are sampled (a few consecutive turns from each), so the
held-out split of `guardian.corpora.conversations.split_of` stays by
conversation. The previous turn is kept as context for the labellers.
Usage: python lab/faceacts_sample.py OUT.csv [--round 2]
Round 2 (more training data) draws other conversations, from the train and dev
parts only, so the held-out test part of round 1 stays what it was.
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = {  # source -> (conversations, turns per conversation)
    "dailydialog": (60, 4),
    "sgd": (35, 4),
    "calls:benign": (25, 4),
    "calls:scam": (25, 4),
    "mentalmanip": (45, 4),
}


def _jsonl(name: str) -> list[dict]:
    with (ROOT / "data" / "conversations" / f"{name}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _mentalmanip() -> list[dict]:
    out = []
    with (ROOT / "data" / "mentalmanip" / "mentalmanip_con.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            turns = []
            for line in row["Dialogue"].splitlines():
                m = re.match(r"\s*(Person\d)\s*:\s*(.*)", line)
                if m and m.group(2).strip():
                    turns.append({"speaker": m.group(1), "text": m.group(2).strip()})
            if len(turns) >= 2:
                out.append({"id": f"mm-{row['ID']}", "turns": turns})
    return out


def main(out: str, *, round_: int = 1) -> None:
    from guardian.corpora.conversations import split_of

    rng = random.Random(25 if round_ == 1 else 25 + round_)
    taken: set[str] = set()
    if round_ > 1:
        with (ROOT / "data" / "faceacts" / "everyday.csv").open(encoding="utf-8") as f:
            taken = {row["conversation_id"] for row in csv.DictReader(f)}
    calls = _jsonl("calls")
    pools = {
        "dailydialog": _jsonl("dailydialog"),
        "sgd": _jsonl("sgd"),
        "calls:benign": [c for c in calls if c.get("label") != "scam"],
        "calls:scam": [c for c in calls if c.get("label") == "scam"],
        "mentalmanip": _mentalmanip(),
    }
    rows = []
    for source, (n_conv, per) in PLAN.items():
        pool = pools[source]
        if round_ > 1:
            pool = [c for c in pool if c["id"] not in taken and split_of(c["id"]) != "test"]
        for conv in rng.sample(pool, n_conv):
            turns = conv["turns"]
            start = rng.randrange(0, max(1, len(turns) - per + 1))
            for i in range(start, min(len(turns), start + per)):
                text = turns[i]["text"].strip()
                if not text:
                    continue
                rows.append(
                    {
                        "item": len(rows),
                        "source": source.split(":")[0],
                        "conversation_id": conv["id"],
                        "turn": i,
                        "speaker": turns[i]["speaker"],
                        "previous": turns[i - 1]["text"].strip() if i else "",
                        "utterance": text,
                    }
                )
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} utterances -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], round_=int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--round" else 1)
