"""Round 13 of the everyday face-act experiment (issue 25): a learned blend of the everyday side's parts.

The everyday side averages its two parts 50/50, p = (head + half) / 2, and reads each turn alone. Per-act
biases and the half's share, chosen on the 470 dev turns, did not carry to the test part (docs/intent.md,
"Per-act biases"): too few turns to choose from. Round 12's 7,069 distilled turns were seen by neither
the bundled head (rounds 8-11) nor its half (round 8), and they are whole conversations, so they can
teach a blend: a multinomial logistic regression on the log-probabilities of the head and of the half,
and of the turn before's blend by the other speaker or by the same one (a reply to a request, a
refusal after pressure), fitted on round 12's turns and chosen on the dev part.

`collect ART OUT.npz`: runs ART over the dev and test parts and over both distilled files (each
conversation from its first row, in turn order, as `guardian eval faceacts` does) and saves every part's
probabilities per turn (`intent_everyday_r4_blend.components_of`) with the rows' labels and rounds.
`fit OUT.npz`: fits the variants on round 12's routed turns and prints dev accuracy, macro-F1 and the
threshold for shown precision .85 (chosen on dev) with its precision and share; `--test NAME` also
scores the variant NAME on the test part, once.
Usage: python lab/intent_everyday_r13_stack.py collect ART OUT.npz
       python lab/intent_everyday_r13_stack.py fit OUT.npz [--test NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.domain_train import SHOWN_PRECISION_Z
from guardian.detectors.intent.model import IntentModel

sys.path.insert(0, str(Path(__file__).parent))
from intent_everyday_r4_blend import components_of, score

EVERYDAY = Path("data/faceacts/everyday.csv")
DISTILLED = (Path("data/faceacts/everyday_distilled.csv"), Path("data/faceacts/everyday_distilled_r12.csv"))
EPS = 1e-4


def collect(artifact: str, out: str) -> None:
    model = IntentModel.load(Path(artifact))
    gold = load_faceacts(EVERYDAY)
    by_file = [load_faceacts(p) for p in DISTILLED]
    distilled = [r for rows in by_file for r in rows]
    rounds = ["8-11"] * len(by_file[0]) + ["12"] * len(by_file[1])  # the files' rounds
    saved: dict[str, np.ndarray] = {}
    for name, rows, tag in (("dev", [r for r in gold if split_of(r.conversation_id) == "dev"], None),
                            ("test", [r for r in gold if split_of(r.conversation_id) == "test"], None),
                            ("distilled", distilled, rounds)):
        order, arrays = components_of(model, rows)
        for key, value in arrays.items():
            saved[f"{name}_{key}"] = value
        saved[f"{name}_conversation"] = np.array([rows[i].conversation_id for i in order])
        saved[f"{name}_turn"] = np.array([rows[i].turn for i in order])
        saved[f"{name}_speaker"] = np.array([rows[i].speaker for i in order])
        saved[f"{name}_round"] = np.array([tag[i] for i in order] if tag else ["gold"] * len(order))
        print(name, len(order), flush=True)
    saved["classes"] = np.array([str(c) for c in model.classes])
    np.savez_compressed(out, **saved)  # type: ignore[arg-type]


def design(z: np.lib.npyio.NpzFile, name: str, *, context: bool, linear: bool = False) -> np.ndarray:
    """Per turn: log head, log half, and (with `context`) the log of the 50/50 side blend of the
    conversation's row before (what a live conversation's state would hold), in one block when the
    other speaker said it, in another when the same speaker did (zeros at its first row)."""
    head, half = z[f"{name}_head"], z[f"{name}_tuned"]
    blocks = [np.log(head + EPS), np.log(half + EPS)] + ([np.log(z[f"{name}_linear"] + EPS)] if linear else [])
    if context:
        side = (head + half) / 2
        conv, turn, speaker = z[f"{name}_conversation"], z[f"{name}_turn"], z[f"{name}_speaker"]
        other = np.zeros_like(side)
        same = np.zeros_like(side)
        last: dict[str, int] = {}  # the conversation's row read before (rows are in turn order)
        for i in np.argsort(turn, kind="stable"):
            j = last.get(conv[i])
            if j is not None:
                (same if speaker[j] == speaker[i] else other)[i] = np.log(side[j] + EPS)
            last[conv[i]] = int(i)
        blocks += [other, same]
    return np.hstack(blocks).astype(np.float32)


def fit(path: str, test: str | None) -> None:
    from sklearn.linear_model import LogisticRegression

    z = np.load(path, allow_pickle=False)
    classes = [str(c) for c in z["classes"]]
    train = (z["distilled_round"] == "12") & z["distilled_everyday_half"]
    print(f"fit on {int(train.sum())} round-12 turns the everyday half read")
    variants: dict[str, object] = {"bundled 50/50": None}
    for context, linear in ((False, False), (True, False), (True, True)):
        for c in (0.01, 0.1, 1.0):
            x = design(z, "distilled", context=context, linear=linear)[train]
            y = z["distilled_gold"][train]
            lr = LogisticRegression(C=c, max_iter=2000).fit(x, y)
            variants[f"stack{'+context' if context else ''}{'+linear' if linear else ''} C{c}"] = (lr, context, linear)
    for name, variant in variants.items():
        if test is not None and name != test and name != "bundled 50/50":
            continue
        chosen: float | None = None  # the dev part's threshold, at which the test part is read
        for part in ("dev",) + (("test",) if test is not None else ()):
            final = z[f"{part}_final"]
            routed = z[f"{part}_everyday_half"]
            if variant is None:
                probs = final
            else:
                lr, context, linear = variant  # type: ignore[misc]
                side = np.zeros_like(final)
                side[:, lr.classes_] = lr.predict_proba(design(z, part, context=context, linear=linear))
                g = z[f"{part}_g"][:, None]
                persuasion = (final - (1 - g) * (z[f"{part}_head"] + z[f"{part}_tuned"]) / 2)
                probs = np.where(routed[:, None], persuasion + (1 - g) * side, final)
            s = score(probs, z[f"{part}_gold"], classes, chosen, z=SHOWN_PRECISION_Z)
            chosen = s["thr"]
            print(name, part, {k: round(v, 4) for k, v in s.items()}, flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["collect"]:
        collect(args[1], args[2])
    elif args[:1] == ["fit"]:
        fit(args[1], args[args.index("--test") + 1] if "--test" in args else None)
    else:
        sys.exit(__doc__)
