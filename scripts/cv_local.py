"""Cross-validated figures of the local model (the shared 5 folds, seed 17); prints JSON.

Each fold trains the product's own `train()` on four folds and measures the fifth
with the product's metrics, so the numbers are those of what ships. With
``--with-maj`` the maj-only dialogues are added to training, after removing every
id of the evaluation fold (maj contains all con dialogues). Examples:

    OMP_NUM_THREADS=1 .venv/bin/python scripts/cv_local.py --data con
    OMP_NUM_THREADS=1 .venv/bin/python scripts/cv_local.py --data maj
    OMP_NUM_THREADS=1 .venv/bin/python scripts/cv_local.py --data con --with-maj --set c_binary=0.5
    OMP_NUM_THREADS=1 .venv/bin/python scripts/cv_local.py --data con --extra-features intent.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np

from guardian.detectors.local_train import (
    TECHNIQUES,
    VULNERABILITIES,
    TrainConfig,
    label_matrices,
    train,
)
from guardian.eval.datasets import load_mentalmanip, mentalmanip_path
from guardian.eval.folds import mentalmanip_folds
from guardian.eval.local_eval import label_decisions
from guardian.eval.metrics import binary_metrics, multilabel_metrics


def _config(pairs: list[str], seed: int) -> TrainConfig:
    config = TrainConfig(seed=seed)
    for pair in pairs:
        key, value = pair.split("=", 1)
        current = getattr(config, key)
        cast = type(current) if current is not None else float
        parsed = (value.lower() in ("1", "true", "yes")) if cast is bool else cast(value)
        config = dataclasses.replace(config, **{key: parsed})
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=["con", "maj"], default="con")
    parser.add_argument("--with-maj", action="store_true", help="add maj-only dialogues to training")
    parser.add_argument(
        "--maj-labels", action="store_true", help="add maj-only dialogues to the technique/vulnerability heads only"
    )
    parser.add_argument("--set", action="append", default=[], help="TrainConfig field=value")
    parser.add_argument(
        "--extra-features",
        help=".npz with `ids` and `features` (one row per dialogue id): appended to the dense block",
    )
    parser.add_argument("--folds", type=int, default=5, help="evaluate only the first N folds")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--dump", help="write each fold's test predictions and labels to this .npz")
    args = parser.parse_args()

    dialogues = load_mentalmanip(mentalmanip_path(args.data))
    extra = load_mentalmanip(mentalmanip_path("maj")) if (args.with_maj or args.maj_labels) else []
    config = _config(args.set, args.seed)
    extra_of: dict[str, np.ndarray] = {}
    if args.extra_features:
        with np.load(args.extra_features, allow_pickle=False) as npz:
            extra_of = {str(i): row for i, row in zip(npz["ids"], npz["features"], strict=True)}

    def extra_rows(items: list) -> np.ndarray | None:
        return np.stack([extra_of[d.id] for d in items]) if extra_of else None

    rows = []
    dump: dict[str, np.ndarray] = {}
    for k, (tr, te) in enumerate(mentalmanip_folds(dialogues)[: args.folds]):
        started = time.perf_counter()
        held_out = {dialogues[i].id for i in te}
        train_set = [dialogues[i] for i in tr]
        known = {d.id for d in train_set}
        additions = [d for d in extra if d.id not in held_out and d.id not in known]
        label_only = additions if args.maj_labels else []
        if args.with_maj:
            train_set += additions
        model = train(train_set, config=config, label_only=label_only, extra_features=extra_rows(train_set + label_only))
        test = [dialogues[i] for i in te]
        inputs = model.block_inputs([d.conversation for d in test], extra=extra_rows(test))
        pred = model.predict_inputs(*inputs)
        y, t, v = label_matrices(test)
        b = binary_metrics(y == 1, pred.decision)
        tm = multilabel_metrics(t, label_decisions(pred, "techniques"), labels=[x.value for x in TECHNIQUES])
        vm = multilabel_metrics(v, label_decisions(pred, "vulnerabilities"), labels=[x.value for x in VULNERABILITIES])
        from sklearn.metrics import roc_auc_score

        row = {
            "fold": k,
            "n_train": len(train_set),
            "accuracy": b.accuracy,
            "macro_f1": b.macro_f1,
            "precision": b.precision,
            "recall": b.recall,
            "false_positive_rate": b.false_positive_rate,
            "auc": float(roc_auc_score(y, pred.probability)),
            "technique_micro_f1": tm.micro_f1,
            "technique_macro_f1": tm.macro_f1,
            "vulnerability_micro_f1": vm.micro_f1,
            "vulnerability_macro_f1": vm.macro_f1,
            "threshold": model.threshold,
            "seconds": time.perf_counter() - started,
        }
        rows.append(row)
        dump.update(
            {
                f"f{k}_probability": pred.probability,
                f"f{k}_techniques": pred.techniques,
                f"f{k}_vulnerabilities": pred.vulnerabilities,
                f"f{k}_ratios": np.array([model.technique_ratio, model.vulnerability_ratio]),
                f"f{k}_threshold": np.array([model.threshold]),
                f"f{k}_y": y,
                f"f{k}_t": t,
                f"f{k}_v": v,
            }
        )
        print(json.dumps({k2: round(v2, 4) if isinstance(v2, float) else v2 for k2, v2 in row.items()}), file=sys.stderr, flush=True)
    if args.dump:
        np.savez(args.dump, **dump)  # type: ignore[arg-type]
    keys = [k for k in rows[0] if k not in ("fold", "n_train")]
    summary = {
        "data": args.data,
        "with_maj": args.with_maj,
        "maj_labels": args.maj_labels,
        "set": args.set,
        "folds": len(rows),
        **{k: f"{np.mean([r[k] for r in rows]):.3f} ± {np.std([r[k] for r in rows]):.3f}" for k in keys},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
