"""Round 4 of the everyday face-act experiment (issue 25): cheaper blends of round 3's parts, on dev.

Round 3's candidate (deep head .8 + everyday tuned half .2) was over the latency target because an
everyday turn made three passes (linear MiniLM, everyday tuned MiniLM, frozen mpnet-6). This runs
an artifact with a deep head over a part of the everyday set in turn order (as `evaluate_file`
does), records every part's probabilities per turn (linear half, MiniLM everyday head, deep head,
everyday tuned half, the conversation's g), and scores blends that skip a pass:

- `deep+head h`: the deep head with the MiniLM everyday head at share h (no tuned pass; the head
  costs nothing more, it reads the vectors the linear half computes anyway);
- `gated t`: the tuned pass only for turns whose cheap blend is below t (a second, serial pass).

For each blend: accuracy, macro-F1, and the abstention threshold for shown precision .85 chosen on
the dev part with its precision and share. `--split test --only NAME` scores one blend on the test
part, with the threshold chosen on dev.
Usage: python lab/intent_everyday_r4_blend.py ARTIFACT_DIR [--split dev|test --only NAME] [--save OUT.npz]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.domain_train import SHOWN_PRECISION, precision_threshold
from guardian.detectors.intent.model import IntentModel
from guardian.detectors.intent.train import metrics, predict_in_turn_order, utterances_in_context


def components(model: IntentModel, part: str) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Gold labels and each part's probabilities per turn (turn order) of one split part."""
    rows = [r for r in load_faceacts("data/faceacts/everyday.csv") if split_of(r.conversation_id) == part]
    return rows, components_of(model, rows)[1]


def components_of(model: IntentModel, rows: list[Any]) -> tuple[list[int], dict[str, np.ndarray]]:
    """(row indices in turn order, each part's probabilities per turn in that order) for `rows`, each
    conversation read from its first row on, as `guardian eval faceacts` reads it."""
    records: list[dict[str, Any]] = []
    original = model._mixer

    def mixer(linear, utterances, u_vecs, ctx_vecs, domains, *, deep=None, routed=False):  # type: ignore[no-untyped-def]
        mix = original(linear, utterances, u_vecs, ctx_vecs, domains, deep=deep, routed=routed)
        ev = model.everyday
        assert ev is not None
        rec: dict[str, Any] = {"linear": linear[0].copy(), "deep": None if deep is None else deep[0].copy(),
                               "head": ev.proba(utterances, u_vecs, ctx_vecs, model.classes)[0],
                               "g": float(domains[0].persuasion) if domains else 1.0, "tuned": None,
                               "everyday_half": routed}
        records.append(rec)

        def wrapped(tuned, **options):  # type: ignore[no-untyped-def]
            if tuned is not None and rec["tuned"] is None:
                rec["tuned"] = tuned[0].copy()
                rec["persuasion_half"] = not routed
            return mix(tuned, **options)

        return wrapped

    model._mixer = mixer  # type: ignore[method-assign]
    order, final = predict_in_turn_order(model, rows, utterances_in_context(rows), range(len(rows)))
    model._mixer = original  # type: ignore[method-assign]
    assert len(records) == len(order)
    n, k = len(order), len(model.classes)
    routed = np.array([r["deep"] is not None for r in records])
    z = np.zeros(k, np.float32)
    arrays = {
        "final": final, "routed": routed, "g": np.array([r["g"] for r in records], np.float32),
        "linear": np.vstack([r["linear"] for r in records]), "head": np.vstack([r["head"] for r in records]),
        "deep": np.vstack([r["deep"] if r["deep"] is not None else z for r in records]),
        "tuned": np.vstack([r["tuned"] if r["tuned"] is not None else z for r in records]),
        "gold": np.array([model.classes.index(rows[i].face_act) for i in order]),
        "persuasion_half": np.array([bool(r.get("persuasion_half")) for r in records]),
        "everyday_half": np.array([bool(r["everyday_half"]) for r in records]),
    }
    assert arrays["final"].shape == (n, k)
    return order, arrays


def blends(a: dict[str, np.ndarray], tuned_weight: float) -> dict[str, tuple[np.ndarray, float]]:
    """name -> (probabilities, share of routed turns that make the tuned pass)."""
    g = a["g"][:, None]
    lin, head, deep, tuned, routed = a["linear"], a["head"], a["deep"], a["tuned"], a["routed"]

    def routed_only(p: np.ndarray) -> np.ndarray:
        return np.where(routed[:, None], p, a["final"])

    with_pass = g * ((1 - tuned_weight) * lin + tuned_weight * tuned)
    no_pass = g * lin  # without the half's pass the persuasion side is the linear half's
    out: dict[str, tuple[np.ndarray, float]] = {}
    out["round3 .8deep+.2tuned"] = (routed_only(with_pass + (1 - g) * (.8 * deep + .2 * tuned)), 1.0)
    for h in (0.0, 0.1, 0.2, 0.3, 0.4):
        out[f"deep+head h{h}"] = (routed_only(no_pass + (1 - g) * ((1 - h) * deep + h * head)), 0.0)
    for h in (0.1, 0.2):
        out[f"deep+tuned.2+head h{h}"] = (routed_only(with_pass + (1 - g) * ((.8 - h) * deep + .2 * tuned + h * head)), 1.0)
    cheap_of: dict[str, Callable[[], np.ndarray]] = {
        "h0": lambda: no_pass + (1 - g) * deep, "h.2": lambda: no_pass + (1 - g) * (.8 * deep + .2 * head)}
    full = with_pass + (1 - g) * (.8 * deep + .2 * tuned)
    for name, cheap_fn in cheap_of.items():
        cheap = cheap_fn()
        for t in (0.4, 0.5, 0.6):
            unsure = cheap.max(1) < t
            p = np.where(unsure[:, None], full, cheap)
            out[f"gated {name} t{t}"] = (routed_only(p), float(unsure[routed].mean()) if routed.any() else 0.0)
    return out


def score(p: np.ndarray, gold: np.ndarray, classes: list[Any], threshold: float | None, *, z: float = 0.0,
          ) -> dict[str, float]:
    """Accuracy, macro-F1 and the shown intents' precision and share at `threshold` (None: the lowest
    that reaches `SHOWN_PRECISION` on these rows, by the Wilson rule at `z` when z > 0, as the runtime's)."""
    m = metrics([classes[j] for j in gold], [classes[j] for j in p.argmax(1)])
    right = p.argmax(1) == gold
    conf = p.max(1)
    if threshold is None:
        threshold, _, _ = precision_threshold(conf, right, target=SHOWN_PRECISION, z=z)
    shown = conf >= threshold
    return {"acc": m["accuracy"], "f1": m["macro_f1"], "thr": threshold,
            "prec": float(right[shown].mean()) if shown.any() else 0.0, "share": float(shown.mean())}


def main() -> None:
    model = IntentModel.load(Path(sys.argv[1]))
    split = sys.argv[sys.argv.index("--split") + 1] if "--split" in sys.argv else "dev"
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    _, dev = components(model, "dev")
    if "--save" in sys.argv:
        np.savez(sys.argv[sys.argv.index("--save") + 1], **dev)
    print(f"dev: {len(dev['gold'])} turns, routed to the everyday side {dev['routed'].mean():.3f}")
    dev_blends = blends(dev, model.tuned_weight)
    for name, (p, share) in dev_blends.items():
        if only is None or name == only:
            s = score(p, dev["gold"], model.classes, None)
            print(f"dev  {name:26} acc {s['acc']:.4f} F1 {s['f1']:.4f} | thr {s['thr']:.3f} prec {s['prec']:.3f} "
                  f"share {s['share']:.3f} | tuned pass on {share:.2f} of routed turns", flush=True)
    if split == "test":
        if only is None:
            raise SystemExit("--split test needs --only NAME (score one blend once)")
        thr = score(dev_blends[only][0], dev["gold"], model.classes, None)["thr"]
        _, test = components(model, "test")
        p, share = blends(test, model.tuned_weight)[only]
        s = score(p, test["gold"], model.classes, thr)
        m = metrics([model.classes[j] for j in test["gold"]], [model.classes[j] for j in p.argmax(1)])
        print(f"TEST {only}: acc {s['acc']:.4f} F1 {s['f1']:.4f} | thr {thr:.3f} (dev) prec {s['prec']:.3f} "
              f"share {s['share']:.3f} | tuned pass {share:.2f}")
        print({c: (round(v["f1"], 3), v["support"]) for c, v in m["per_class"].items()})


if __name__ == "__main__":
    main()
