"""Issue 19: long conversations. Which flag rule keeps a 40-100 turn ordinary call quiet?

A real phone call runs to 40-100+ turns; our ordinary conversations are 6-22. A rule that flags a
conversation when any one turn crosses the threshold has as many chances to fire as there are turns, so
a 2 % false-alarm rate per DailyDialog dialogue becomes about 20 % per 40-turn call (measured:
`lab/turn_register_stress.py`). Manipulation and scams rarely rest on one turn: the turn-labelled
dialogues carry 3.5 manipulative turns each, a scammer asks again and again. So this compares, on the
per-turn scores of `lab/turn_dialogue_scores.py` (a turn's score does not depend on its window):

- `any`: a window is flagged when one turn reaches t (shipped);
- `two`: when one turn reaches t_hi, or two turns *of the same speaker* in the window reach t_lo
  (the flag then lands on the second).

Long conversations are made by joining five conversations of the same set, part and label in id order
(two speakers, `A` and `B`), as `lab/turn_register_stress.py` does. Every threshold is chosen on the dev
part alone: the lowest that keeps each ordinary kind (short and joined) within its budget; then the test
part is read once. Prints JSON per rule: thresholds, and per set/part/label the share flagged at some
prefix (window 10) and who is named first.
A same-speaker pair counts only when it stands `--margin` above every other speaker's pair in the
window (`repetition.REPEAT_MARGIN`; 0 gives the rule as first shipped); `--pairs T/R/M,... --part dev`
prints the table from which the margin was chosen.
Usage: python lab/turn_long_rules.py SCORES.jsonl --artifact DIR [--budget-long 0.05] [--margin M]
       [--pairs T/R[/M],... [--part dev]]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from guardian.detectors.local.model import platt_probability
from guardian.detectors.local.repetition import REPEAT_MARGIN, REPEAT_WINDOW, window_evidence
from guardian.detectors.local.reply_pair import dialogue_turn

SHORT_BUDGET = {"dailydialog": 0.02, "sgd": 0.02, "calls": 0.05}
ORDINARY = ("dailydialog", "sgd", "calls")
WINDOW = REPEAT_WINDOW  # the replay's window, as `guardian watch` and the rule read it


def pair_evidence(p: np.ndarray, speakers: list[str], margin: float) -> tuple[np.ndarray, list[str | None]]:
    """Per turn, as the detector reads the window of `WINDOW` turns ending there (`repetition.window_evidence`):
    the best lower score of a same-speaker pair standing `margin` above the other speakers' (what rule
    `two` compares with t_lo), and that pair's speaker."""
    evidence = window_evidence(p, speakers, window=WINDOW, margin=margin)
    return (np.array([low for low, _ in evidence]),
            [None if first is None else speakers[first] for _, first in evidence])


def first_flag(r: dict, rule: str, t: float, t_lo: float) -> tuple[int, str] | None:
    """The first turn at which a window ending there is flagged, and who is blamed, or None."""
    top = r["top"] >= t
    hit = top | (r["two"] >= t_lo) if rule == "two" else top
    if not hit.any():
        return None
    i = int(np.argmax(hit))
    return i, (r["speakers"][i] if top[i] else r["two_by"][i])


def joined(rows: list[dict], size: int = 5) -> list[dict]:
    """Rows of the same set/part/label joined five at a time into one long two-speaker conversation."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["id"]):
        groups[(r["set"], r["part"], r["label"])].append(r)
    out = []
    for (name, part, label), rs in groups.items():
        for k in range(0, len(rs) - size + 1, size):
            chunk = rs[k: k + size]
            speakers: list[str] = []
            for r in chunk:
                first = r["speakers"][0]
                speakers += ["A" if s == first else "B" for s in r["speakers"]]
            out.append({"set": name + "+long", "part": part, "label": label, "suspect": None,
                        "speakers": speakers, "p": np.concatenate([r["p"] for r in chunk]),
                        "scam": np.concatenate([np.asarray(r["scam"]) for r in chunk])})
    return out


def scored_rows(scores: Path, artifact: Path) -> list[dict]:
    """The scored conversations outside chatbot threads, each turn's `p` as the detector reads it
    (`reply_pair.dialogue_turn` with the artifact's dialogue scale) and `scam` as an array."""
    a, b = json.loads((artifact / "manifest.json").read_text())["reply_pair"]["dialogue_platt"]
    with scores.open(encoding="utf-8") as f:
        rows = [r for r in map(json.loads, f) if r["set"] != "chatbot" and "pair:shipped" in r]
    for r in rows:
        r["p"] = dialogue_turn(platt_probability(np.array(r["pair:shipped"]), (a, b)), np.array(r["net"]))
        r["scam"] = np.array(r["scam"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scores", type=Path)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--budget-long", type=float, default=0.05,
                        help="false-alarm budget of the joined ordinary conversations (dev)")
    parser.add_argument("--grid", type=int, default=120)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--margin", type=float, default=REPEAT_MARGIN,
                        help="how far a speaker's pair must stand above the other speakers' (0: the rule before)")
    parser.add_argument("--pairs", default="", help="'T/R[/M],...': print a table for these (threshold, repeat "
                                                     "threshold[, margin]) choices instead of choosing")
    parser.add_argument("--part", default="test", choices=("dev", "test"), help="with --pairs: the part shown")
    args = parser.parse_args()
    rows = scored_rows(args.scores, args.artifact)
    ordinary = [r for r in rows if r["set"] in ORDINARY and r["label"] == "benign"]
    rows += joined(ordinary)
    for r in rows:
        r["top"] = np.maximum(r["p"], r["scam"])
        r["two"], r["two_by"] = pair_evidence(r["p"], r["speakers"], args.margin)
    grid = np.round(np.linspace(0.2, 0.98, args.grid), 4)

    def shares(rule: str, t: float, t_lo: float) -> dict[tuple, dict[str, float]]:
        cells: dict[tuple, list] = defaultdict(list)
        for r in rows:
            hit = first_flag(r, rule, t, t_lo)
            cells[(r["set"], r["part"], r["label"])].append(
                (hit is not None, None if hit is None or r["suspect"] is None else hit[1] == r["suspect"]))
        out = {}
        for k, v in cells.items():
            named = [x for f, x in v if f and x is not None]
            out[k] = {"n": len(v), "flagged": round(float(np.mean([f for f, _ in v])), 4)}
            if named:
                out[k]["suspect_named"] = round(float(np.mean(named)), 4)
        return out

    def quiet(s: dict[tuple, dict[str, float]], long_budget: float | None) -> bool:
        for (name, part, label), v in s.items():
            if part != "dev" or label != "benign":
                continue
            base = name.removesuffix("+long")
            if base not in SHORT_BUDGET:
                continue
            budget = SHORT_BUDGET[base] if name == base else long_budget
            if budget is not None and v["flagged"] > budget:
                return False
        return True

    def recall(s: dict[tuple, dict[str, float]]) -> float:
        keys = [("dialogue", "dev", "manipulative"), ("calls", "dev", "scam")]
        return float(np.mean([s[k]["flagged"] for k in keys if k in s]))

    def mm_macro_f1(s: dict[tuple, dict[str, float]], part: str) -> float:
        """MentalManip con macro-F1 of the part (a dialogue flagged at some prefix counts as flagged)."""
        pos, neg = s[("mentalmanip", part, "manipulative")], s[("mentalmanip", part, "benign")]
        tp, fn = pos["flagged"] * pos["n"], (1 - pos["flagged"]) * pos["n"]
        fp, tn = neg["flagged"] * neg["n"], (1 - neg["flagged"]) * neg["n"]
        return float((2 * tp / (2 * tp + fp + fn) + 2 * tn / (2 * tn + fn + fp)) / 2)

    if args.pairs:
        part = args.part
        wanted = [("dailydialog", part, "benign"), ("dailydialog+long", part, "benign"), ("sgd", part, "benign"),
                  ("calls", part, "benign"), ("calls+long", part, "benign"), ("calls", part, "scam"),
                  ("dialogue", part, "manipulative"), ("dialogue", part, "benign")]
        if part == "test":
            wanted += [("gaslighting", "eval", "manipulative"), ("gaslighting", "eval", "benign")]
        print("| threshold / repeat / margin | " + " | ".join("/".join(k) for k in wanted)
              + f" | MentalManip {part} macro-F1 |")
        for spec in args.pairs.split(","):
            t, r, *m = (float(v) for v in spec.split("/"))
            margin = m[0] if m else args.margin
            for row in rows:
                row["two"], row["two_by"] = pair_evidence(row["p"], row["speakers"], margin)
            s = shares("two" if r < t else "any", t, r)
            cells = []
            for k in wanted:
                v = s.get(k, {})
                cell = f"{100 * v.get('flagged', 0):.1f} %"
                if "suspect_named" in v and k[2] != "benign":
                    cell += f" / {100 * v['suspect_named']:.0f} %"
                cells.append(cell)
            print(f"| {t:.2f} / {r:.2f} / {margin:.2f} | " + " | ".join(cells) + f" | {mm_macro_f1(s, part):.3f} |")
        return
    candidates: list[tuple[str, float, float, float | None]] = [("any", t, t, None) for t in grid]
    candidates += [("any", t, t, args.budget_long) for t in grid]
    for t in grid[::2]:
        for t_lo in grid[::2]:
            if t_lo < t:
                candidates.append(("two", float(t), float(t_lo), args.budget_long))
    best: dict[tuple[str, str], tuple] = {}
    for rule, t, t_lo, long_budget in candidates:
        s = shares(rule, t, t_lo)
        picks = {"mentalmanip": (mm_macro_f1(s, "dev"), -t)}
        if quiet(s, long_budget):
            picks["quiet" if long_budget is None else "quiet+long"] = (recall(s), -t)
        for pick, score in picks.items():
            key = (rule, pick)
            if key not in best or score > best[key][0]:
                best[key] = (score, t, t_lo, s)
    report = []
    for (rule, pick), (_, t, t_lo, s) in sorted(best.items()):
        entry = {"rule": rule, "pick": pick, "t": t, "t_lo": t_lo,
                 "mentalmanip_macro_f1": {part: round(mm_macro_f1(s, part), 4) for part in ("dev", "test")},
                 "sets": {"/".join(k): v for k, v in sorted(s.items())}}
        report.append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "sets"}))
        for k, v in sorted(s.items()):
            print("   ", "/".join(k), v)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
