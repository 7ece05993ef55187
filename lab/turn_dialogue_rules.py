"""How rules that join the network's turn score with a pair head's would flag, from `lab/turn_dialogue_scores.py`.

For each rule (how a turn's p(manipulative) is made of the network's `net` and a pair head's calibrated
probability), the threshold is chosen on the dev part alone, as `calibration.calibrate` chooses the medium
one: the lowest that keeps every ordinary kind within its false-alarm budget (DailyDialog and SGD 2 %,
synthetic calls 5 %) and, where `--fair-budget` is given, the dev part's benign turn-labelled dialogues
within it. Then per set and part: the share flagged at some turn (a turn's p(manipulative) or the network's
p(scam) at or over the threshold), who is named at the first flag (the suspect's share), turn precision on
the turn-labelled dialogues, and MentalManip's dialogue-level accuracy / macro-F1 / FPR.
Prints JSON, one object per rule.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

BUDGET = {"dailydialog": 0.02, "sgd": 0.02, "calls": 0.05}

RULES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "net": lambda net, pair: net,
    "pair": lambda net, pair: pair,
    "mean": lambda net, pair: (net + pair) / 2,
    "geo": lambda net, pair: np.sqrt(net * pair),
    "min": lambda net, pair: np.minimum(net, pair),
    "max": lambda net, pair: np.maximum(net, pair),
    "mean3": lambda net, pair: (net + 2 * pair) / 3,
}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scores", type=Path, nargs="+")
    parser.add_argument("--pair", default="shipped", help="which pair head's logits (pair:NAME)")
    parser.add_argument("--platt", default="", help="a,b of the pair head's Platt scale (default: fitted on dev)")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--fair-budget", type=float, default=None)
    parser.add_argument("--threshold", type=float, default=None, help="a fixed threshold instead of the dev choice")
    parser.add_argument("--pick", choices=("quiet", "mentalmanip"), default="quiet",
                        help="threshold: the lowest within the budgets (medium), or MentalManip dev's best macro-F1 (high)")
    parser.add_argument("--table", action="store_true", help="one line per rule and group instead of JSON")
    args = parser.parse_args()
    rows = [json.loads(line) for f in args.scores for line in f.open(encoding="utf-8")]
    key = f"pair:{args.pair}"
    rows = [r for r in rows if key in r or args.rules == "net"]
    if args.platt:
        a, b = (float(v) for v in args.platt.split(","))
    else:  # fitted on the dev part's turn-labelled turns and ordinary turns
        from guardian.detectors.local.calibration import platt

        x, y = [], []
        for r in rows:
            if r["part"] == "dev" and r["set"] in ("dialogue", "dailydialog", "sgd") and key in r:
                marked = set(r["manipulative_turns"] or [])
                x += r[key]
                y += [int(i in marked) for i in range(len(r[key]))]
        a, b = platt(np.array(x), np.array(y)) if x else (1.0, 0.0)
    out = []
    for name in args.rules.split(","):
        rule = RULES[name]

        def turn_scores(r: dict, rule: Callable = rule) -> np.ndarray:
            net = np.array(r["net"])
            pair = sigmoid(a * np.array(r[key]) + b) if key in r else net
            return np.maximum(rule(net, pair), np.array(r["scam"]))

        scored = [(r, turn_scores(r)) for r in rows]

        def flagged_share(t: float, part: str, sets: tuple[str, ...], label: str = "benign",
                          scored: list = scored) -> dict[str, float]:
            share = defaultdict(list)
            for r, s in scored:
                if r["part"] == part and r["set"] in sets and r["label"] == label:
                    share[r["set"]].append(bool((s >= t).any()))
            return {k: float(np.mean(v)) for k, v in share.items()}

        def quiet(t: float) -> bool:
            dev = flagged_share(t, "dev", tuple(BUDGET))
            if any(dev.get(k, 0.0) > v for k, v in BUDGET.items()):
                return False
            if args.fair_budget is not None:
                return flagged_share(t, "dev", ("dialogue",)).get("dialogue", 0.0) <= args.fair_budget
            return True

        def mm_macro_f1(t: float, part: str = "dev", scored: list = scored) -> float:
            y = np.array([r["label"] == "manipulative" for r, _ in scored if r["set"] == "mentalmanip" and r["part"] == part])
            p = np.array([bool((s >= t).any()) for r, s in scored if r["set"] == "mentalmanip" and r["part"] == part])
            return float(np.mean([2 * float(((y == c) & (p == c)).sum()) / max(float((y == c).sum() + (p == c).sum()), 1)
                                  for c in (True, False)]))

        grid = np.round(np.linspace(0.005, 0.995, 199), 4)
        if args.threshold is not None:
            threshold = args.threshold
        elif args.pick == "mentalmanip":
            threshold = float(max(grid, key=mm_macro_f1))
        else:
            threshold = float(min((t for t in grid if quiet(t)), default=0.995))
        result: dict[str, object] = {"rule": name, "threshold": threshold, "platt": [round(a, 4), round(b, 4)]}
        groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        mm: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
        for r, s in scored:
            hit = np.flatnonzero(s >= threshold)
            g = groups[f"{r['set']}:{r['part']}:{r['label']}"]
            g["flagged"].append(bool(len(hit)))
            if len(hit) and r.get("suspect"):
                g["suspect_first"].append(r["speakers"][hit[0]] == r["suspect"])
            if r["manipulative_turns"] is not None and len(hit):
                marked = set(r["manipulative_turns"])
                g["turn_precision"].extend(int(i) in marked for i in hit)
            if r["set"] == "mentalmanip":
                mm[r["part"]].append((r["label"] == "manipulative", bool(len(hit))))
        for name_, g in sorted(groups.items()):
            result[name_] = {k: (round(float(np.mean(v)), 3), len(v)) for k, v in g.items() if v}
        for part, pairs in mm.items():
            y = np.array([p[0] for p in pairs])
            p = np.array([p[1] for p in pairs])
            f1 = [2 * float(((y == c) & (p == c)).sum()) / max(float((y == c).sum() + (p == c).sum()), 1) for c in (1, 0)]
            result[f"mentalmanip:{part}"] = {"accuracy": round(float((y == p).mean()), 3),
                                             "macro_f1": round(float(np.mean(f1)), 3), "fpr": round(float(p[~y].mean()), 3)}
        out.append(result)
    if not args.table:
        print(json.dumps(out, indent=1))
        return
    for result in out:
        print(f"== {result['rule']} threshold {result['threshold']} platt {result['platt']}")
        for k, v in result.items():
            if isinstance(v, dict):
                print(f"  {k:34s} " + "  ".join(f"{m}={x[0] if isinstance(x, list | tuple) else x}"
                                                  + (f"/{x[1]}" if isinstance(x, list | tuple) else "")
                                                  for m, x in v.items()))


if __name__ == "__main__":
    main()
