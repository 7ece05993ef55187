"""Issue 19: can a chatbot reply be judged better than by a linear model over its frozen MiniLM vector?

The reply head (`detectors/local/reply.py`) is a logistic regression over the reply's own MiniLM
vector. Trained on one writer's exchanges, it blocked 6 of 32 manipulative replies written by four
other writers (round 2 of `data/chatbot/exchanges.jsonl`); retrained on both rounds, 8 of 32. Quiet
manipulation (dodging a question about fees, guilt about the bot's feelings, a veiled threat) is
about what a reply *does* to the request before it, which a topical sentence vector hardly holds.
This compares, on the same rows:

- `frozen_reply`: the shipped head's recipe (LR over the reply's vector; chatbot negatives weighted
  2, ordinary turns 1, the manipulative replies 1);
- `frozen_pair`: the same over [reply, request, reply x request];
- `tuned_pair`: MiniLM fine-tuned on the pair (request, reply), mean-pooled, one linear unit; BCE
  with the same three group weights; AdamW lr `--lr`, `--epochs`, 2 torch threads, bfloat16.

Rows: train part of the exchanges (both rounds) and `--ordinary` turns of the train part of SGD,
DailyDialog and benign calls (the turn before as the request); scored on the dev and test parts:
AUC of the manipulative replies against every assistant reply of the benign threads, by writing
round, and the share of manipulative / benign replies blocked at two thresholds: the one that flags
2 % of the dev SGD dialogues (a dialogue's score: its highest assistant turn), and the chatbot point
chosen as `calibration.calibrate` (then `train.calibrate`) does (at or above it, the best dev blocked-minus-benign share), and the
issue's budget applied on dev (at or above it, the lowest threshold blocking at most 10 % of the dev
benign replies), with test SGD's flagged share at each. Prints one JSON object (and writes `--out`).
Usage: python lab/turn_reply_finetune.py [--epochs 3] [--lr 5e-5] [--ordinary 3000] [--out FILE] [--scores FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from turn_finetune_mil import Scorer

from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
from guardian.detectors.local.corpus import load_chatbot_exchanges, training_encoder

Row = tuple[str, str, int, str]  # (request, reply, label, group)


def exchange_rows(part: str) -> list[tuple[Row, str]]:
    """(row, writing round) for every assistant turn of the part's exchanges: the manipulative thread's
    last reply is positive; its earlier replies and every reply of a benign thread negative."""
    out = []
    for c in load_chatbot_exchanges():
        if split_of(c.id) != part:
            continue
        turns = c.conversation.turns
        for i, t in enumerate(turns):
            if t.speaker != "Assistant":
                continue
            positive = c.label == "manipulative" and i == len(turns) - 1
            out.append(((turns[i - 1].text if i else "", t.text, int(positive), "chatbot"), c.id.split("-")[0]))
    return out


def ordinary_rows(part: str, limit: int, seed: int) -> list[Row]:
    rows: list[Row] = []
    for name in ("sgd", "dailydialog", "calls"):
        for c in load_conversations(conversations_dir() / f"{name}.jsonl"):
            if split_of(c.id) == part and c.label != "scam":
                turns = c.conversation.turns
                rows += [(turns[i - 1].text if i else "", t.text, 0, "ordinary") for i, t in enumerate(turns)]
    pick = np.random.default_rng(seed).permutation(len(rows))[:limit]
    return [rows[int(i)] for i in pick]


def sgd_dialogues(part: str, limit: int) -> list[list[tuple[str, str]]]:
    """Assistant turns of SGD dialogues of a part, as (request, reply) pairs per dialogue."""
    out = []
    for c in load_conversations(conversations_dir() / "sgd.jsonl"):
        if split_of(c.id) == part:
            turns = c.conversation.turns
            out.append([(turns[i - 1].text if i else "", t.text) for i, t in enumerate(turns)
                        if i and t.speaker != turns[0].speaker])
    return out[:limit]


def weights(rows: list[Row]) -> np.ndarray:
    """Manipulative replies 1, other chatbot turns 2, ordinary turns 1 in total (the shipped head's)."""
    y = np.array([r[2] for r in rows])
    g = np.array([r[3] for r in rows])
    w = np.zeros(len(rows))
    for mask, total in ((y == 1, 1.0), ((y == 0) & (g == "chatbot"), 2.0), (g == "ordinary", 1.0)):
        w[mask] = total / max(mask.sum(), 1)
    return w / w.mean()


def judge(scores: dict[str, Any], rows: dict[str, list[tuple[Row, str]]], sgd: dict[str, list[float]]) -> dict:
    from sklearn.metrics import roc_auc_score

    quiet = float(np.quantile(sgd["dev"], 0.98))
    # The chatbot point as `calibration.calibrate` (then `train.calibrate`) chooses it: among the thresholds that keep the dev task
    # dialogues quiet (this one and above), the one that best tells the dev manipulative replies from
    # the benign ones (blocked share minus benign blocked share; the higher threshold on a tie).
    s_dev = np.array(scores["dev"])
    y_dev = np.array([r[2] for r, _ in rows["dev"]])
    candidates = [float(t) for t in np.unique(np.concatenate([s_dev, [quiet]])) if t >= quiet]
    chatbot = max(candidates, key=lambda t: (float((s_dev[y_dev == 1] >= t).mean() - (s_dev[y_dev == 0] >= t).mean()), t))
    # The issue's own budget applied on dev: the lowest threshold that blocks at most 10 % of the dev
    # benign replies (and at or above the task dialogues' quiet point).
    within = [float(t) for t in np.unique(s_dev) if t >= quiet and float((s_dev[y_dev == 0] >= t).mean()) <= 0.10]
    budget = min(within, default=float(s_dev.max()))
    out: dict[str, Any] = {}
    for point, t in (("sgd_2pct", quiet), ("chatbot_point", chatbot), ("benign_10pct_on_dev", budget)):
        cell: dict[str, Any] = {"threshold": round(t, 4),
                                "test_sgd_flagged": round(float(np.mean(np.array(sgd["test"]) >= t)), 4)}
        for part in ("dev", "test"):
            s = np.array(scores[part])
            y = np.array([r[2] for r, _ in rows[part]])
            rnd = np.array([w for _, w in rows[part]])
            for name, mask in (("all", np.ones(len(y), bool)), ("round1", rnd == "asst"), ("round2", rnd == "asst2")):
                pos, neg = mask & (y == 1), mask & (y == 0)
                if point == "sgd_2pct":
                    out[f"{part}_{name}_auc"] = round(float(roc_auc_score(y[mask], s[mask])), 4)
                cell[f"{part}_{name}"] = {"manipulative_blocked": f"{int((s[pos] >= t).sum())}/{int(pos.sum())}",
                                          "benign_replies_blocked": f"{int((s[neg] >= t).sum())}/{int(neg.sum())}"}
        out[point] = cell
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--ordinary", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sgd-dialogues", type=int, default=400)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--skip-tuned", action="store_true")
    ap.add_argument("--scores", help="also save every scorer's dev/test scores here (.npz)")
    ap.add_argument("--out", default="lab/data/turn_reply_finetune.json")
    args = ap.parse_args()
    import torch
    from sklearn.linear_model import LogisticRegression

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    train = [r for r, _ in exchange_rows("train")] + ordinary_rows("train", args.ordinary, args.seed)
    held = {p: exchange_rows(p) for p in ("dev", "test")}
    sgd = {p: sgd_dialogues(p, args.sgd_dialogues) for p in ("dev", "test")}
    y = np.array([r[2] for r in train])
    w = weights(train)
    result: dict[str, Any] = {"rows": {"train": len(train), "train_positive": int(y.sum()),
                                       "dev": len(held["dev"]), "test": len(held["test"])}, "settings": vars(args)}

    encoder = training_encoder()
    saved: dict[str, np.ndarray] = {}

    def vec(texts: list[str]) -> np.ndarray:
        return np.asarray(encoder.encode(texts), np.float32)

    def frozen(view: str) -> tuple[Any, Any]:
        def x(pairs: list[tuple[str, str]]) -> np.ndarray:
            reply = vec([b for _, b in pairs])
            if view == "reply":
                return reply
            request = vec([a or "start" for a, _ in pairs])
            return np.hstack([reply, request, reply * request])

        model = LogisticRegression(C=1.0, max_iter=5000).fit(x([(a, b) for a, b, _, _ in train]), y, sample_weight=w)
        return model, x

    for view in ("reply", "pair"):
        model, x = frozen(view)
        scores = {p: model.decision_function(x([(a, b) for (a, b, _, _), _ in held[p]])) for p in held}
        sgd_scores = {p: [float(model.decision_function(x(d)).max()) for d in sgd[p] if d] for p in sgd}
        result[f"frozen_{view}"] = judge(scores, held, sgd_scores)
        saved.update({f"frozen_{view}_{p}": np.asarray(v) for p, v in scores.items()})
        print(view, json.dumps(result[f"frozen_{view}"]), flush=True)

    if not args.skip_tuned:
        from guardian.encoding.finetune import batches_per_epoch, warmup_linear

        scorer = Scorer("minilm")
        params = scorer.parameters()
        optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
        scheduler = warmup_linear(optimizer, args.epochs * batches_per_epoch(len(train), args.batch))
        rng = np.random.default_rng(args.seed)
        began = time.time()
        for epoch in range(args.epochs):
            scorer.encoder.train()
            perm = rng.permutation(len(train))
            for step, s in enumerate(range(0, len(perm), args.batch)):
                chosen = perm[s : s + args.batch]
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    z = scorer.logits([(train[i][0], train[i][1]) for i in chosen]).float()
                loss = (torch.nn.functional.binary_cross_entropy_with_logits(
                    z, torch.tensor(y[chosen], dtype=torch.float32), reduction="none")
                        * torch.tensor(w[chosen], dtype=torch.float32)).mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                scheduler.step()
                if step % 20 == 0:
                    print(f"epoch {epoch + 1} step {step} loss {float(loss):.4f} {time.time() - began:.0f} s", flush=True)
        train_s = time.time() - began
        scorer.encoder.eval()

        def tuned(pairs: list[tuple[str, str]]) -> np.ndarray:
            out = []
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                for s in range(0, len(pairs), 64):
                    out.append(scorer.logits(pairs[s : s + 64]).float().numpy())
            return np.concatenate(out) if out else np.zeros(0)

        scores = {p: tuned([(a, b) for (a, b, _, _), _ in held[p]]) for p in held}
        sgd_scores = {p: [float(tuned(d).max()) for d in sgd[p] if d] for p in sgd}
        result["tuned_pair"] = {**judge(scores, held, sgd_scores), "train_s": round(train_s)}
        saved.update({f"tuned_pair_{p}": np.asarray(v) for p, v in scores.items()})
        print("tuned", json.dumps(result["tuned_pair"]), flush=True)
    print(json.dumps(result))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.scores:
        np.savez(args.scores, **saved)


if __name__ == "__main__":
    main()
