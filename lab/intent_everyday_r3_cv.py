"""Round 3 of the everyday face-act experiment (issue 25), stage 2: error analysis and grouped CV.

Reads the arrays of `lab/intent_everyday_r3_features.py` (and optionally an everyday tuned half's
probabilities from `lab/intent_everyday_r3_tune.py`).

- `--analysis`: the shipped model on the dev part: confusion matrix, per-act scores, how often
  `other` is predicted against how often it is right, and the misses by the kind of turn before.
- default: 5-fold conversation-grouped CV over train + dev (1,291 utterances) of candidate everyday
  heads (logistic regression on frozen MiniLM / mpnet-6 / mpnet-12 vectors of the turn and the turn
  before, guideline cue features, the persuasion halves' probabilities), each alone and averaged with
  the shipped everyday tuned half. Scored on all 1,291 out-of-fold rows and on the 848 "clean" rows
  (round 2's train rows and the dev part), which no part of the shipped model's everyday side learnt
  from, so the shipped model's score there is a fair comparison.
- `--test NAME W`: fit candidate NAME on train + dev, average with the tuned half at W, score the
  test part once; prints the dev-part threshold for shown precision .85 (from the OOF dev rows).
Usage: python lab/intent_everyday_r3_cv.py FEATS.npz [--analysis] [--half EV_PROBS.npz] [--test NAME W]
"""

from __future__ import annotations

import csv
import sys
from collections import Counter

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.cues import N_CUES
from guardian.detectors.intent.cues import cue_vector as cues
from guardian.detectors.intent.domain_train import precision_threshold
from guardian.detectors.intent.train import metrics, utterances_in_context
from guardian.taxonomy import FaceAct

EVERYDAY = "data/faceacts/everyday.csv"
ACTS = [str(a) for a in FaceAct]

def load() -> tuple[list, list[int], dict[str, list[int]]]:  # type: ignore[type-arg]
    rows = load_faceacts(EVERYDAY)
    with open(EVERYDAY, encoding="utf-8") as f:
        rounds = [int(r["round"]) for r in csv.DictReader(f)]
    parts = {p: [i for i, r in enumerate(rows) if split_of(r.conversation_id) == p] for p in ("train", "dev", "test")}
    return rows, rounds, parts


def gold(rows, idx):  # type: ignore[no-untyped-def]
    return [str(rows[i].face_act) for i in idx]


def analysis(f, rows, parts) -> None:  # type: ignore[no-untyped-def]
    classes = [str(c) for c in f["classes"]]
    dev = parts["dev"]
    p = f["final"][dev]
    pred = [classes[j] for j in p.argmax(1)]
    g = gold(rows, dev)
    m = metrics([FaceAct(x) for x in g], [FaceAct(x) for x in pred])
    print(f"shipped model, dev ({len(dev)}): acc {m['accuracy']:.4f} macro-F1 {m['macro_f1']:.4f}")
    labels = [a for a in ACTS if a in set(g) | set(pred)]
    print("confusion (rows gold, columns predicted):")
    print(f"{'':7}" + "".join(f"{a:>7}" for a in labels) + f"{'n':>6}")
    for a in labels:
        print(f"{a:7}" + "".join(f"{sum(1 for x, y in zip(g, pred, strict=True) if x == a and y == b):7d}"
                                 for b in labels) + f"{g.count(a):6d}")
    for a, s in m["per_class"].items():
        print(f"  {a:6} P {s['precision']:.3f} R {s['recall']:.3f} F1 {s['f1']:.3f} n {s['support']}")
    print(f"predicted other {pred.count('other')} times (gold other {g.count('other')})")
    pairs = Counter((x, y) for x, y in zip(g, pred, strict=True) if x != y)
    print("commonest confusions (gold -> predicted):", pairs.most_common(10))
    utts = utterances_in_context(rows)
    prev_q = np.array(["?" in utts[i].context[-1][1] if utts[i].context else False for i in dev])
    right = np.array([x == y for x, y in zip(g, pred, strict=True)])
    for name, mask in (("previous turn a question", prev_q), ("previous turn not a question", ~prev_q)):
        print(f"  {name}: n {mask.sum()}, accuracy {right[mask].mean():.3f}, gold other "
              f"{np.mean(np.array(g)[mask] == 'other'):.3f}")
    for name in ("lin", "tuned", "esc", "head", "ev_tuned"):
        q = [classes[j] for j in f[name][dev].argmax(1)]
        mm = metrics([FaceAct(x) for x in g], [FaceAct(x) for x in q])
        print(f"  part {name:8} alone: acc {mm['accuracy']:.3f} macro-F1 {mm['macro_f1']:.3f}, predicts other "
              f"{q.count('other')}")


def folds_of(rows, idx, k: int = 5) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Conversation-grouped folds: conversations shuffled with a fixed seed, dealt round-robin by size."""
    convs = sorted({rows[i].conversation_id for i in idx})
    rng = np.random.default_rng(17)
    rng.shuffle(convs)
    size = Counter(rows[i].conversation_id for i in idx)
    load_, fold_of = [0] * k, {}
    for c in sorted(convs, key=lambda c: -size[c]):
        j = int(np.argmin(load_))
        fold_of[c] = j
        load_[j] += size[c]
    return np.array([fold_of[rows[i].conversation_id] for i in idx])


def design(f, rows, name: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    utts = utterances_in_context(rows)
    blocks = []
    for part in name.split("+"):
        if part == "mini":
            blocks += [f["u"], f["ctx"][:, :384] * 0.6]
        elif part == "mp6q":  # the int8 vectors the live detector computes (lab/intent_everyday_r3_frozen.py)
            blocks += [f["mp6q_u"], f["mp6q_prev"] * 0.6]
        elif part == "mp6qu":  # the turn alone: what the turn before adds
            blocks += [f["mp6q_u"]]
        elif part == "cues03":
            blocks += [0.3 * design(f, rows, "cues")]
        elif part in ("mp6", "mp12"):
            blocks += [f[f"{part}_u"], f[f"{part}_prev"] * 0.6]
        elif part in ("mp6u", "mp12u", "miniu"):
            blocks += [f["u"] if part == "miniu" else f[f"{part[:-1]}_u"]]
        elif part == "cues":
            blocks += [np.vstack([cues(u.text) for u in utts]),
                       0.5 * np.vstack([cues(u.context[-1][1]) if u.context else np.zeros(N_CUES, np.float32)
                                        for u in utts])]
        elif part == "pers":
            blocks += [np.log(np.clip(f[k], 1e-4, 1)) / 5 for k in ("lin", "tuned", "esc")]
        elif part == "side":
            blocks += [np.array([[1.0 if u.opener else 0.0, 1.0 if u.position == 0 else 0.0] for u in utts], np.float32)]
        else:
            raise ValueError(part)
    return np.hstack(blocks).astype(np.float32)


def fit_predict(x_tr, y_tr, x_te, *, c: float, power: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    from sklearn.linear_model import LogisticRegression

    counts = Counter(y_tr)
    w = np.array([(len(y_tr) / (len(counts) * counts[y])) ** power for y in y_tr])
    clf = LogisticRegression(C=c, max_iter=3000).fit(x_tr, y_tr, sample_weight=w)
    out = np.zeros((len(x_te), len(ACTS)), np.float32)
    for j, cl in enumerate(clf.classes_):
        out[:, ACTS.index(cl)] = clf.predict_proba(x_te)[:, j]
    return out


def aligned(p: np.ndarray, classes) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros((len(p), len(ACTS)), np.float32)
    for j, c in enumerate(classes):
        out[:, ACTS.index(str(c))] = p[:, j]
    return out


def score(rows, idx, p) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    m = metrics([rows[i].face_act for i in idx], [FaceAct(ACTS[j]) for j in p.argmax(1)])
    return m["accuracy"], m["macro_f1"]


CANDIDATES = ["mini", "mini+cues", "mp6", "mp12", "mp12u", "mp12+cues", "mp6+cues", "mp12+cues+pers",
              "mini+mp12+cues", "mp12+cues+side", "mp12+cues+pers+side"]


def main() -> None:
    f = dict(np.load(sys.argv[1]))
    if "--frozen" in sys.argv:
        f.update(np.load(sys.argv[sys.argv.index("--frozen") + 1]))
    rows, rounds, parts = load()
    if "--analysis" in sys.argv:
        analysis(f, rows, parts)
        return
    classes = [str(c) for c in f["classes"]]
    final = aligned(f["final"], classes)
    half = aligned(f["ev_tuned"], classes)
    head = aligned(f["head"], classes)  # the shipped everyday head (round 1's train rows only)
    if "--half" in sys.argv:
        h = np.load(sys.argv[sys.argv.index("--half") + 1])
        half = aligned(h["probs"], [str(c) for c in h["classes"]])
    idx = np.array(parts["train"] + parts["dev"])
    y = np.array(gold(rows, idx))
    clean = np.array([not (rounds[i] == 1 and split_of(rows[i].conversation_id) == "train") for i in idx])
    dev_mask = np.array([split_of(rows[i].conversation_id) == "dev" for i in idx])
    folds = folds_of(rows, idx)
    print(f"CV rows {len(idx)}, clean {clean.sum()}, folds {np.bincount(folds).tolist()}")
    a, m = score(rows, idx[clean], final[idx[clean]])
    print(f"{'shipped model':40} clean acc {a:.4f} F1 {m:.4f} | dev {score(rows, idx[dev_mask], final[idx[dev_mask]])}")
    a, m = score(rows, idx[clean], half[idx[clean]])
    print(f"{'everyday tuned half alone':40} clean acc {a:.4f} F1 {m:.4f}")
    if "--test" in sys.argv:
        k = sys.argv.index("--test")
        name, w, c, power = sys.argv[k + 1], float(sys.argv[k + 2]), float(sys.argv[k + 3]), float(sys.argv[k + 4])
        test = np.array(parts["test"])
        x = design(f, rows, name)
        oof = np.zeros((len(idx), len(ACTS)), np.float32)
        for j in range(5):
            tr, te = folds != j, folds == j
            oof[te] = fit_predict(x[idx[tr]], y[tr], x[idx[te]], c=c, power=power)
        p_oof = (1 - w) * oof + w * half[idx]
        pred = [ACTS[j] for j in p_oof[clean].argmax(1)]
        g_clean = list(y[clean])
        print("out-of-fold confusion on the clean rows (rows gold, columns predicted):")
        print(f"{'':7}" + "".join(f"{a:>7}" for a in ACTS))
        for a in ACTS:
            print(f"{a:7}" + "".join(f"{sum(1 for u, v in zip(g_clean, pred, strict=True) if u == a and v == b):7d}"
                                     for b in ACTS))
        print(f"predicted other {pred.count('other')} times (gold other {g_clean.count('other')})")
        if "--no-test" in sys.argv:
            return
        conf = p_oof[dev_mask].max(1)
        right = p_oof[dev_mask].argmax(1) == np.array([ACTS.index(v) for v in y[dev_mask]])
        thr, prec, cov = precision_threshold(conf, right, target=0.85)
        print(f"dev (out-of-fold) threshold {thr:.3f}: precision {prec:.3f}, share {cov:.3f}")
        p = (1 - w) * fit_predict(x[idx], y, x[test], c=c, power=power) + w * half[test]
        g = [rows[i].face_act for i in test]
        m_ = metrics(g, [FaceAct(ACTS[j]) for j in p.argmax(1)])
        shown = p.max(1) >= thr
        right_t = p.argmax(1) == np.array([ACTS.index(str(v)) for v in g])
        print(f"TEST {name} w {w} C {c} power {power}: acc {m_['accuracy']:.4f} macro-F1 {m_['macro_f1']:.4f}; "
              f"shown precision {right_t[shown].mean():.4f} share {shown.mean():.4f}")
        print(m_["per_class"])
        return
    names = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else CANDIDATES
    for name in names:
        x = design(f, rows, name)
        for c in [float(v) for v in (sys.argv[sys.argv.index("--c") + 1].split(",") if "--c" in sys.argv
                                     else ("0.5", "2"))]:
            for power in [float(v) for v in (sys.argv[sys.argv.index("--pw") + 1].split(",") if "--pw" in sys.argv
                                             else ("0.5", "1"))]:
                oof = np.zeros((len(idx), len(ACTS)), np.float32)
                for j in range(5):
                    tr, te = folds != j, folds == j
                    oof[te] = fit_predict(x[idx[tr]], y[tr], x[idx[te]], c=c, power=power)
                line = f"{name:22} C {c:<4} pw {power:<4}"
                for w, h in ((0.0, 0.0), (0.2, 0.0), (0.3, 0.0), (0.4, 0.0), (0.2, 0.2), (0.3, 0.2)):
                    p = (1 - w - h) * oof + w * half[idx] + h * head[idx]
                    a_all, m_all = score(rows, idx, p)
                    a, m = score(rows, idx[clean], p[clean])
                    line += f" | w{w} h{h}: all {a_all:.3f}/{m_all:.3f} clean {a:.3f}/{m:.3f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
