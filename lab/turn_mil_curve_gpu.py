"""Issue 19: the MentalManip encoder-size curve, fine-tuned by MIL, on a GPU (reads `lab/turn_mil_curve_payload.py`'s files).

Runs where no guardian environment is: torch, numpy, transformers and scikit-learn only, the pairs
already tokenised, the weights int8 with row scales. The recipe is `lab/turn_finetune_mil.py`'s (a
MentalManip dialogue is a bag whose logit is the soft maximum of its turns'; one-turn ordinary
negatives; mean pooling, one linear unit; AdamW, linear warm-up and decay, bfloat16) with what the
model card asked of a GPU hour: larger encoders, the scam calls of the train part as positive bags
(`--scam` of them), 8,000 ordinary negatives, and 5-fold cross-validation.

Protocols:
- `split`: train on the MentalManip con train part; thresholds chosen on the dev part (best macro-F1;
  and the lowest that flags at most 2 % of the dev ordinary conversations, "quiet"); scored on the
  test part and on the test ordinary conversations. FPR by dialogue length (2-4, 5-8, 9+ turns).
- `cv`: five folds over all 1,808 con dialogues by a hash of the id; each fold's dialogues scored
  by the model trained on the other four. Pooled out-of-fold AUC, the figures at p >= .5 (fixed
  beforehand), and, marked as an upper bound, the best threshold on the pooled out-of-fold scores
  themselves.

Writes one JSON object per call to `--out`, rewritten after each experiment (a run cut short keeps
what finished). Usage: python lab/turn_mil_curve_gpu.py --payload .gpu --runs minilm:split,minilm:cv --out FILE
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

ENCODERS = {"minilm": ("minilm", 6), "mpnet6": ("mpnet", 6), "mpnet12": ("mpnet", 12)}
LENGTHS = {"2-4": (2, 4), "5-8": (5, 8), "9+": (9, 10_000)}


def load_state(payload: Path, family: str, layers: int) -> dict[str, Any]:
    import torch

    files = ["minilm.npz"] if family == "minilm" else ["mpnet_a.npz", "mpnet_b.npz"]
    state: dict[str, Any] = {}
    for name in files:
        path = payload / name
        if not path.exists():
            path = Path("/root/stash") / name  # left by an earlier call on the same machine
        with np.load(path) as z:
            for key in z.files:
                if key.endswith("::s"):
                    continue
                base = key.removesuffix("::q")
                if base.startswith("encoder.layer.") and int(base.split(".")[2]) >= layers:
                    continue
                value = z[key].astype(np.float32) * z[f"{base}::s"] if key.endswith("::q") else z[key].astype(np.float32)
                state[base] = torch.from_numpy(value)
    return state


class Scorer:
    def __init__(self, meta: dict[str, Any], payload: Path, encoder: str, device: str) -> None:
        import torch
        from transformers import BertConfig, BertModel, MPNetConfig, MPNetModel

        family, layers = ENCODERS[encoder]
        cfg = {k: v for k, v in meta[family]["config"].items()
               if k not in ("architectures", "_name_or_path", "transformers_version")}
        cfg["num_hidden_layers"] = layers
        if family == "minilm":
            self.encoder = BertModel(BertConfig(**cfg), add_pooling_layer=False)
        else:
            self.encoder = MPNetModel(MPNetConfig(**cfg), add_pooling_layer=False)
        missing, unexpected = self.encoder.load_state_dict(load_state(payload, family, layers), strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise SystemExit(f"weights do not fit {encoder}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.encoder.to(device)
        self.head = torch.nn.Linear(cfg["hidden_size"], 1).to(device)
        torch.nn.init.zeros_(self.head.bias)
        torch.nn.init.normal_(self.head.weight, std=0.02)
        self.family, self.device = family, device

    def parameters(self) -> list[Any]:
        return [*self.encoder.parameters(), *self.head.parameters()]

    def logits(self, ids: Any, lengths: Any, first: Any) -> Any:
        import torch

        width = int(lengths.max())
        ids = ids[:, :width]
        pos = torch.arange(width, device=ids.device)[None, :]
        mask = (pos < lengths[:, None]).long()
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self.family == "minilm":
            kwargs["token_type_ids"] = ((pos >= first[:, None]) & (mask > 0)).long()
        with torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16):
            hidden = self.encoder(**kwargs).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
            return self.head(pooled.float()).squeeze(-1).float()


class Pairs:
    """Every pair of one tokeniser as a padded matrix on the device."""

    def __init__(self, data: Any, family: str, pad: int, device: str) -> None:
        import torch

        offsets, flat = data[f"{family}_offsets"], data[f"{family}_ids"].astype(np.int64)
        lengths = np.diff(offsets)
        matrix = np.full((len(lengths), int(lengths.max())), pad, np.int64)
        for i, (a, b) in enumerate(itertools.pairwise(offsets)):
            matrix[i, : b - a] = flat[a:b]
        self.ids = torch.from_numpy(matrix).to(device)
        self.lengths = torch.from_numpy(lengths).to(device)
        self.first = torch.from_numpy(data[f"{family}_first"].astype(np.int64)).to(device)

    def rows(self, idx: Any) -> tuple[Any, Any, Any]:
        return self.ids[idx], self.lengths[idx], self.first[idx]


class Fit:
    """AdamW (weight decay .01) with linear warm-up over the first tenth of `steps` and linear decay, the
    gradient clipped at norm 1: the schedule of both GPU runners (`guardian.encoding.finetune`'s, which
    cannot be imported where no guardian environment is, warms up over 6 %)."""

    def __init__(self, scorer: Scorer, *, lr: float, steps: int) -> None:
        import torch

        self.params = scorer.parameters()
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.01)
        warm = max(1, steps // 10)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm))))

    def step(self, loss: Any) -> None:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.scheduler.step()


def train(scorer: Scorer, pairs: Pairs, bags: list[np.ndarray], labels: np.ndarray, *, epochs: int, bag_batch: int,
          lr: float, seed: int) -> dict[str, Any]:
    import torch

    steps = epochs * -(-len(bags) // bag_batch)
    fit = Fit(scorer, lr=lr, steps=steps)
    rng = np.random.default_rng(seed)
    began, losses = time.time(), []
    scorer.encoder.train()
    for _ in range(epochs):
        perm = rng.permutation(len(bags))
        for s in range(0, len(perm), bag_batch):
            chosen = perm[s : s + bag_batch]
            idx = np.concatenate([bags[int(i)] for i in chosen])
            owner = torch.from_numpy(np.repeat(np.arange(len(chosen)), [len(bags[int(i)]) for i in chosen])).to(
                pairs.ids.device)
            z = scorer.logits(*pairs.rows(torch.from_numpy(idx).to(pairs.ids.device)))
            top = torch.full((len(chosen),), -1e9, device=z.device).scatter_reduce(0, owner, z, "amax")
            w = torch.exp(z - top[owner])  # softmax within each bag
            num = torch.zeros(len(chosen), device=z.device).index_add(0, owner, w * z)
            den = torch.zeros(len(chosen), device=z.device).index_add(0, owner, w)
            y = torch.from_numpy(labels[chosen].astype(np.float32)).to(z.device)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(num / den, y)
            fit.step(loss)
            losses.append(float(loss.detach()))
    return {"steps": steps, "train_s": round(time.time() - began, 1), "last_loss": round(float(np.mean(losses[-50:])), 4)}


def scores(scorer: Scorer, pairs: Pairs, groups: list[np.ndarray], *, batch: int = 1024) -> np.ndarray:
    """Each group's highest turn probability."""
    import torch

    scorer.encoder.eval()
    flat = np.concatenate(groups)
    order = flat[np.argsort(pairs.lengths[torch.from_numpy(flat).to(pairs.ids.device)].cpu().numpy(), kind="stable")]
    z: dict[int, float] = {}
    with torch.inference_mode():
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            for i, v in zip(idx, scorer.logits(*pairs.rows(torch.from_numpy(idx).to(pairs.ids.device))).cpu().numpy(),
                            strict=True):
                z[int(i)] = float(v)
    best = np.array([max(z[int(i)] for i in g) for g in groups])
    return 1.0 / (1.0 + np.exp(-best))


def point(p: np.ndarray, y: np.ndarray, turns: np.ndarray, threshold: float) -> dict[str, Any]:
    from sklearn.metrics import accuracy_score, f1_score

    d = p >= threshold
    neg = y == 0
    by_length = {name: round(float(d[neg & (turns >= lo) & (turns <= hi)].mean()), 4)
                 for name, (lo, hi) in LENGTHS.items() if np.any(neg & (turns >= lo) & (turns <= hi))}
    return {"threshold": round(float(threshold), 4), "accuracy": round(float(accuracy_score(y, d)), 4),
            "macro_f1": round(float(f1_score(y, d, average="macro")), 4), "fpr": round(float(d[neg].mean()), 4),
            "recall": round(float(d[~neg].mean()), 4), "fpr_by_turns": by_length}


def best_f1(p: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(max(np.unique(p), key=lambda t: f1_score(y, p >= t, average="macro")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--payload", default=".gpu")
    ap.add_argument("--runs", default="minilm:split")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--bag-batch", type=int, default=32)
    ap.add_argument("--lr", default="minilm=4e-5,mpnet6=3e-5,mpnet12=3e-5")
    ap.add_argument("--scam", type=int, default=300, help="train-part scam calls used as positive bags")
    ap.add_argument("--negatives", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new experiment after this many seconds")
    ap.add_argument("--limit", type=int, default=0, help="smoke test: this many groups of each kind")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="curve.json")
    args = ap.parse_args()
    import torch

    began = time.time()
    payload = Path(args.payload)
    meta = json.loads((payload / "meta.json").read_text())
    data = np.load(payload / "data.npz")
    sources, parts = meta["sources"], meta["parts"]
    source, part, label = data["source"], data["part"], data["label"]
    fold, turns = data["fold"], data["turns"]
    group_rows = [np.arange(a, b) for a, b in zip(data["start"], data["end"], strict=True)]
    rng = np.random.default_rng(args.seed)

    def chosen(mask: np.ndarray, limit: int = 0) -> np.ndarray:
        idx = np.flatnonzero(mask)
        limit = limit or args.limit
        return idx[rng.permutation(len(idx))[:limit]] if limit else idx

    mm = source == sources.index("mentalmanip")
    scam = chosen(source == sources.index("scam"), min(args.scam, args.limit or args.scam))
    negative = chosen(source == sources.index("negative"), min(args.negatives, args.limit or args.negatives))
    mm_by_part = {p: chosen(mm & (part == parts.index(p))) for p in parts}
    ordinary = {p: {k: chosen((source == sources.index(k)) & (part == parts.index(p))) for k in ("dailydialog", "sgd", "calls")}
                for p in ("dev", "test")}
    lrs = {k: float(v) for k, v in (x.split("=") for x in args.lr.split(","))}
    result: dict[str, Any] = {"settings": vars(args), "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                              "data": {"mentalmanip": {p: len(v) for p, v in mm_by_part.items()}, "scam_bags": len(scam),
                                       "negatives": len(negative)}, "runs": {}}
    out = Path(args.out)
    pair_cache: dict[str, Pairs] = {}
    for run in args.runs.split(","):
        if time.time() - began > args.budget_s:
            result["runs"][run] = "skipped: budget"
            continue
        encoder, protocol = run.split(":")
        family = ENCODERS[encoder][0]
        if family not in pair_cache:
            pair_cache[family] = Pairs(data, family, meta[family]["pad"], args.device)
        pairs = pair_cache[family]
        t0 = time.time()

        def fit(mm_train: np.ndarray, encoder: str = encoder, pairs: Pairs = pairs) -> tuple[Scorer, dict[str, Any]]:
            torch.manual_seed(args.seed)
            scorer = Scorer(meta, payload, encoder, args.device)
            groups = np.concatenate([mm_train, scam, negative])
            info = train(scorer, pairs, [group_rows[int(g)] for g in groups], label[groups], epochs=args.epochs,
                         bag_batch=args.bag_batch, lr=lrs[encoder], seed=args.seed)
            return scorer, info

        def score(scorer: Scorer, groups: np.ndarray, pairs: Pairs = pairs) -> np.ndarray:
            return scores(scorer, pairs, [group_rows[int(g)] for g in groups])

        from sklearn.metrics import roc_auc_score

        if protocol == "split":
            scorer, info = fit(mm_by_part["train"])
            dev, test = mm_by_part["dev"], mm_by_part["test"]
            p_dev, p_test = score(scorer, dev), score(scorer, test)
            p_ord_dev = score(scorer, np.concatenate(list(ordinary["dev"].values())))
            p_ord_test = {k: score(scorer, v) for k, v in ordinary["test"].items()}
            grid = np.unique(np.concatenate([p_dev, p_ord_dev]))
            quiet = min((t for t in grid if np.mean(p_ord_dev >= t) <= 0.02), default=1.0)
            y_test = label[test]
            result["runs"][run] = {
                "train": info, "dev_auc": round(float(roc_auc_score(label[dev], p_dev)), 4),
                "test_auc": round(float(roc_auc_score(y_test, p_test)), 4),
                "best_macro_f1_on_dev": point(p_test, y_test, turns[test], best_f1(p_dev, label[dev])),
                "quiet_2pct_on_dev": {**point(p_test, y_test, turns[test], quiet),
                                      "ordinary_test_flagged": {k: round(float(np.mean(v >= quiet)), 4)
                                                                for k, v in p_ord_test.items()}},
                "at_0.5": point(p_test, y_test, turns[test], 0.5),
                "ordinary_test_flagged_at_0.5": {k: round(float(np.mean(v >= 0.5)), 4) for k, v in p_ord_test.items()},
            }
        else:
            every = np.concatenate(list(mm_by_part.values()))
            oof = np.zeros(len(every))
            folds = []
            for k in range(5):
                if folds and time.time() - began > args.budget_s:
                    break  # the folds done so far are reported, and say so
                held = fold[every] == k
                scorer, info = fit(every[~held])
                oof[held] = score(scorer, every[held])
                folds.append({**info, "auc": round(float(roc_auc_score(label[every[held]], oof[held])), 4)})
                del scorer
                torch.cuda.empty_cache() if args.device == "cuda" else None
            done = np.isin(fold[every], np.arange(len(folds)))
            every, oof = every[done], oof[done]
            y = label[every]
            result["runs"][run] = {"folds": folds, "dialogues_scored": int(done.sum()), "oof_auc": round(float(roc_auc_score(y, oof)), 4),
                                   "at_0.5": point(oof, y, turns[every], 0.5),
                                   "upper_bound_best_threshold_on_oof": point(oof, y, turns[every], best_f1(oof, y))}
        result["runs"][run]["wall_s"] = round(time.time() - t0, 1)
        print(run, json.dumps(result["runs"][run]), flush=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    result["wall_s"] = round(time.time() - began, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
