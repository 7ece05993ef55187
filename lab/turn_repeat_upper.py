"""Issue 19: would the repetition rule keep long everyday talk quieter if a pair also needed one sharp turn?

The rule (`repetition.py`) flags a window when two turns of one speaker both reach the repeat threshold
(.30 at medium) and the pair stands `REPEAT_MARGIN` above the other side's. On five DailyDialog dialogues
joined into one, most remaining flags are two mild turns (.31 and .32: "it's a nasty habit"; a job
candidate praising himself twice). This adds one condition, that the higher turn of the pair reaches U,
and prints the share flagged at some turn by set and label (dev, then test; medium's .90 / .30, margin .1),
from the per-turn scores of `lab/turn_dialogue_scores.py` (joined conversations as `lab/turn_long_rules.py`).
Measured 2026-11-27, not shipped: U = .4 loses a dev manipulative dialogue and a dev scam call, the
criterion the margin was chosen by (docs/model-card.md, "The one who answers in kind").
Usage: python lab/turn_repeat_upper.py SCORES.jsonl
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from turn_long_rules import joined, scored_rows

from guardian.detectors.local.repetition import REPEAT_WINDOW, standing_pairs

UPPER = (0.0, 0.4, 0.5, 0.6, 0.7)
COLUMNS = [("dailydialog", "benign"), ("dailydialog+long", "benign"), ("calls", "benign"), ("calls+long", "benign"),
           ("calls", "scam"), ("dialogue", "manipulative"), ("dialogue", "benign"), ("gaslighting", "manipulative"),
           ("gaslighting", "benign"), ("mentalmanip", "manipulative"), ("mentalmanip", "benign")]


def evidence(p: np.ndarray, speakers: list[str], upper: float) -> np.ndarray:
    """Per live window: the best lower score of a standing pair whose higher turn reaches `upper`."""
    out = []
    for end in range(len(p)):
        start = max(0, end + 1 - REPEAT_WINDOW)
        lows = [low for i, j, low in standing_pairs(p[start: end + 1], speakers[start: end + 1])
                if max(p[start + i], p[start + j]) >= upper]
        out.append(max(lows, default=0.0))
    return np.array(out)


def main() -> None:
    rows = scored_rows(Path(sys.argv[1]), Path("src/guardian/resources/turn_model"))
    rows += joined([r for r in rows if r["set"] in ("dailydialog", "sgd", "calls") and r["label"] == "benign"])
    for r in rows:
        r["top"] = np.maximum(r["p"], r["scam"])
        r["ev"] = {u: evidence(r["p"], r["speakers"], u) for u in UPPER}
    for part in ("dev", "test"):
        print(part, " | ".join(f"{name}/{label}" for name, label in COLUMNS))
        for u in UPPER:
            cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
            for r in rows:
                if r["part"] == part or (part == "test" and r["part"] == "eval"):
                    cells[(r["set"], r["label"])].append(bool(((r["top"] >= 0.90) | (r["ev"][u] >= 0.30)).any()))
            print(f"U={u}", " | ".join(f"{100 * np.mean(cells[k]):.1f} %" if cells[k] else "-" for k in COLUMNS))


if __name__ == "__main__":
    main()
