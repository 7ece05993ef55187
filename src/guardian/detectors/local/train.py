"""Training of the turn model (what `guardian train` runs); never imported on the per-turn path.

Multiple-instance learning over the bags of `data`: a bag's manipulation
logit is a soft maximum of its turns' logits (softmax-weighted mean, so it lies
between the mean and the maximum and never grows with the number of turns);
turns known to be harmless are pushed down one by one. Technique and
vulnerability heads read the same soft maximum's attention: "the labels of the
dialogue belong to its most manipulative turns"; after the fit, the window label
head (`labels`) replaces them at run time.

Parts (by `corpora.conversations.split_of` and the same hash for MentalManip ids):
train fits the weights, dev picks the epoch, the calibration and the thresholds,
test is never read here (evaluation reports it). The calibration on dev is `calibration`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guardian.detectors.local.calibration import calibrate
from guardian.detectors.local.corpus import chatbot_exchanges_path, dialogue_turns_path, load_corpus
from guardian.detectors.local.data import TECHNIQUES, VULNERABILITIES, Bag, TrainingSet
from guardian.detectors.local.labels import fit_label_head
from guardian.detectors.local.model import MANIP, OUTPUTS, SCAM, TECH, VULN, TurnModel
from guardian.detectors.local.reply import fit_reply_head
from guardian.progress import Progress


@dataclass(frozen=True, slots=True)
class TrainConfig:
    seed: int = 17
    hidden: int = 512
    dropout: float = 0.4
    #: The epoch with the lowest dev loss is kept (3 of 8 in the shipped run; later ones overfit).
    epochs: int = 8
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_bags: int = 64
    #: Sharpness of the soft maximum over a bag's turns.
    sharpness: float = 1.0
    #: Weight of a MentalManip bag relative to a conversation of another kind: with 2, the easy
    #: movie-vs-everyday contrast drowned MentalManip's own (dev AUC .53 -> .73 with 16; lab/turn_sweep.py).
    mentalmanip_weight: float = 16.0
    #: Weight of the scam head's "no scam here" on MentalManip dialogues.
    mentalmanip_scam_weight: float = 0.3
    #: Add the mean of the recent turns to each turn's features.
    context: bool = False
    #: Weight of the key-phrase hint bags (0: no hints).
    hint_weight: float = 0.0
    #: Weight of the re-framed MentalManip turns (`reframed_pairs`; 0: none).
    augment_weight: float = 4.0
    #: L2 of the window label head (`labels.fit_label_head`; 0: none, the per-turn heads answer).
    #: .03 / .1 / .3 / 1: dev technique micro-F1 .459 / .466 / .451 / .451 (lab/turn_labels.py).
    label_l2: float = 0.1
    #: Weight of the chatbot exchanges' bags in the network (`data/chatbot/exchanges.jsonl`; 0: the
    #: reply head alone learns from them). 4 / 8: dev AUC on them .79 at best, ordinary calls flagged
    #: more (lab/turn_sweep.py; docs/history.md "Turn model").
    chatbot_weight: float = 0.0
    #: Weight of the turn-labelled dialogues' bags in the network (`data/dialogues/turns.jsonl`; 0: only
    #: the fine-tuned pair head learns from them).
    dialogue_weight: float = 0.0
    #: Inverse L2 of the reply head (`reply.fit_reply_head`; 0: none).
    reply_c: float = 1.0
    #: Fine-tune the (reply, request) head that answers in chatbot threads (`reply_pair_train`; 5-7 min
    #: on two cores), and how many ordinary turns it reads as negatives.
    reply_pair: bool = True
    reply_pair_ordinary: int = 3000


@dataclass
class _Batch:
    rows: np.ndarray  # (B, L) -1 padded
    manip: np.ndarray  # (B,) target, nan when absent
    scam: np.ndarray
    tech: np.ndarray  # (B, 11), nan rows when absent
    vuln: np.ndarray
    negative_turns: np.ndarray  # (B,) bool
    weight: np.ndarray


def _collate(bags: Sequence[Bag], config: TrainConfig) -> _Batch:
    width = max(len(b.rows) for b in bags)
    rows = np.full((len(bags), width), -1, dtype=np.int64)
    manip = np.full(len(bags), np.nan, np.float32)
    scam = np.full(len(bags), np.nan, np.float32)
    tech = np.full((len(bags), len(TECHNIQUES)), np.nan, np.float32)
    vuln = np.full((len(bags), len(VULNERABILITIES)), np.nan, np.float32)
    negative = np.zeros(len(bags), bool)
    weight = np.ones(len(bags), np.float32)
    for i, b in enumerate(bags):
        rows[i, : len(b.rows)] = b.rows
        if b.manipulative is not None:
            manip[i] = b.manipulative
        if b.scam is not None:
            scam[i] = b.scam
        elif b.source == "mentalmanip":
            scam[i] = 0.0
        if b.techniques is not None:
            tech[i] = b.techniques
        if b.vulnerabilities is not None:
            vuln[i] = b.vulnerabilities
        negative[i] = b.negative_turns
        weight[i] = b.weight * _source_weights(config).get(b.source, 1.0)
    return _Batch(rows, manip, scam, tech, vuln, negative, weight)


def _source_weights(config: TrainConfig) -> dict[str, float]:
    """Each bag source's weight in the network's loss (sources not named: 1; 0: left out)."""
    return {"mentalmanip": config.mentalmanip_weight, "mentalmanip_hint": config.hint_weight,
            "augment": config.augment_weight, "chatbot": config.chatbot_weight, "dialogue": config.dialogue_weight}


def fit(
    data: TrainingSet,
    train: Sequence[Bag],
    dev: Sequence[Bag],
    *,
    config: TrainConfig = TrainConfig(),
    progress: Progress | None = None,
    sparse_x: Any = None,
) -> tuple[TurnModel, list[dict[str, float]]]:
    """Weights of the epoch with the best dev loss, uncalibrated (see `calibrate`).

    `sparse_x` (CSR, one row per feature row): a linear block over sparse features (TF-IDF of
    the turn) added to the network's logits.
    """
    import torch

    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    x_all = torch.from_numpy(np.ascontiguousarray(data.features, dtype=np.float32))
    net = torch.nn.Sequential(
        torch.nn.Linear(x_all.shape[1], config.hidden),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Dropout(config.dropout),
        torch.nn.Linear(config.hidden, OUTPUTS),
    )
    params = list(net.parameters())
    sparse_w = None
    if sparse_x is not None:
        sparse_w = torch.nn.Parameter(torch.zeros(sparse_x.shape[1], OUTPUTS))
        params.append(sparse_w)
    optimiser = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    tech_pos = _pos_weight([b.techniques for b in train if b.techniques is not None])
    vuln_pos = _pos_weight([b.vulnerabilities for b in train if b.vulnerabilities is not None])

    def loss_of(batch: _Batch) -> tuple[torch.Tensor, float]:
        rows = torch.from_numpy(batch.rows)
        mask = rows >= 0
        z = net(x_all[rows.clamp(min=0)])  # (B, L, OUTPUTS)
        if sparse_w is not None:
            flat = batch.rows.clip(min=0).reshape(-1)
            sub = sparse_x[flat].tocoo()
            indices = torch.from_numpy(np.vstack([sub.row, sub.col]).astype(np.int64))
            values = torch.from_numpy(sub.data.astype(np.float32))
            block = torch.sparse_coo_tensor(indices, values, (len(flat), sparse_x.shape[1]))
            z = z + torch.sparse.mm(block, sparse_w).reshape(z.shape)
        very_low = torch.finfo(z.dtype).min / 4
        weight = torch.from_numpy(batch.weight)
        total = torch.zeros(())
        bce = torch.nn.functional.binary_cross_entropy_with_logits

        def soft_max(col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            attention = torch.softmax(torch.where(mask, config.sharpness * col, very_low), dim=1)
            return (attention * col).sum(dim=1), attention

        negative = torch.from_numpy(batch.negative_turns)
        for column, targets in ((MANIP, batch.manip), (SCAM, batch.scam)):
            target = torch.from_numpy(targets)
            present = ~torch.isnan(target)
            col = z[..., column]
            pooled, _ = soft_max(col)
            bag_loss = bce(pooled, torch.nan_to_num(target), reduction="none")
            # Turns known to be harmless: each one pushed down (mean over the bag's turns).
            turn_loss = bce(col, torch.zeros_like(col), reduction="none")
            turn_loss = (turn_loss * mask).sum(dim=1) / mask.sum(dim=1)
            per_bag = torch.where(negative, turn_loss, bag_loss)
            total = total + (per_bag * weight * present).sum() / present.sum().clamp(min=1)
        _, attention = soft_max(z[..., MANIP].detach())
        for cols, targets, pos in ((TECH, batch.tech, tech_pos), (VULN, batch.vuln, vuln_pos)):
            target = torch.from_numpy(targets)
            present = ~torch.isnan(target[:, 0])
            if not bool(present.any()):
                continue
            pooled = (attention.unsqueeze(-1) * z[..., cols]).sum(dim=1)
            label_loss = bce(pooled[present], target[present], pos_weight=pos, reduction="none").mean(dim=1)
            total = total + label_loss.mean() * 0.5
        return total, float(total.detach())

    scale = _source_weights(config)
    order = [b for b in train if scale.get(b.source, 1.0) > 0]
    history: list[dict[str, float]] = []
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    dev = [b for b in dev if b.source not in ("chatbot", "dialogue") or scale[b.source] > 0]
    dev_batches = [_collate(dev[i : i + 256], config) for i in range(0, len(dev), 256)]
    for epoch in range(config.epochs):
        net.train()
        perm = rng.permutation(len(order))
        losses = []
        for i in range(0, len(perm), config.batch_bags):
            batch = _collate([order[j] for j in perm[i : i + config.batch_bags]], config)
            optimiser.zero_grad()
            loss, value = loss_of(batch)
            loss.backward()
            optimiser.step()
            losses.append(value)
        net.eval()
        with torch.no_grad():
            dev_loss = float(np.mean([loss_of(b)[1] for b in dev_batches])) if dev_batches else 0.0
        history.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "dev_loss": dev_loss})
        if best is None or dev_loss < best[0]:
            best = (dev_loss, {k: v.clone() for k, v in net.state_dict().items()})
            if sparse_w is not None:
                best[1]["__sparse__"] = sparse_w.detach().clone()
        if progress is not None:
            progress(f"epoch {epoch + 1} dev loss {dev_loss:.4f}", epoch + 1, config.epochs)
    assert best is not None
    best_sparse = best[1].pop("__sparse__", None)
    net.load_state_dict(best[1])
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    model = TurnModel(
        w1=state["0.weight"].T.copy(),
        b1=state["0.bias"].copy(),
        w2=state["3.weight"].T.copy(),
        b2=state["3.bias"].copy(),
        manip_platt=(1.0, 0.0),
        scam_platt=(1.0, 0.0),
        thresholds={"low": 0.5, "medium": 0.5, "high": 0.5},
        scam_threshold=0.5,
        context=config.context,
        sparse_w=None if best_sparse is None else best_sparse.numpy(),
    )
    return model, history


def _pos_weight(rows: Sequence[np.ndarray]) -> Any:
    import torch

    if not rows:
        return None
    y = np.vstack(rows)
    pos = y.sum(axis=0)
    return torch.from_numpy(np.clip((len(y) - pos) / np.maximum(pos, 1), 1.0, 20.0).astype(np.float32))


def bag_max(model: TurnModel, features: np.ndarray, bags: Sequence[Bag]) -> tuple[np.ndarray, np.ndarray]:
    """(highest manipulation logit, highest scam logit) of each bag."""
    z = model.logits(features)
    manip = np.array([z[b.rows, MANIP].max() for b in bags], dtype=np.float32)
    scam = np.array([z[b.rows, SCAM].max() for b in bags], dtype=np.float32)
    return manip, scam


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def training_files(
    *, mentalmanip: Sequence[Path] | None = None, conversations: Sequence[Path] | None = None, with_chatbot: bool = True
) -> list[Path]:
    """The files an artifact was trained from, in the order its manifest's `data_sha256` hashes them."""
    from guardian.corpora.conversations import conversations_dir
    from guardian.corpora.datasets import mentalmanip_path

    return [*(mentalmanip or [mentalmanip_path("con"), mentalmanip_path("maj")]),
            *(sorted(conversations_dir().glob("*.jsonl")) if conversations is None else conversations),
            *([chatbot_exchanges_path()] if with_chatbot else []),
            *([dialogue_turns_path()] if with_chatbot and dialogue_turns_path().is_file() else [])]


def train_and_save(
    out: Path,
    *,
    config: TrainConfig = TrainConfig(),
    mentalmanip: Sequence[Path] | None = None,
    conversations: Sequence[Path] | None = None,
    progress: Progress | None = None,
) -> tuple[TurnModel, dict[str, object]]:
    """The whole recipe: corpus, fit, calibration on dev, artifact in `out`."""
    import platform

    from guardian.corpora.datasets import file_sha256

    # The chatbot exchanges and turn-labelled dialogues join the default corpus; a run on given
    # conversation files reads only those.
    with_chatbot = (conversations is None and (config.chatbot_weight > 0 or config.reply_c > 0)
                    and chatbot_exchanges_path().is_file())
    corpus = load_corpus(seed=config.seed, mentalmanip=mentalmanip, conversations=conversations, progress=progress,
                         context=config.context, chatbot=None if with_chatbot else [],
                         dialogues=None if with_chatbot else [])
    model, history = fit(corpus.data, corpus.train, corpus.dev, config=config, progress=progress)
    label_head = fit_label_head(model, corpus, l2=config.label_l2, seed=config.seed) if config.label_l2 > 0 else {}
    reply_head = fit_reply_head(model, corpus, c=config.reply_c, seed=config.seed) if config.reply_c > 0 else {}
    reply_pair: dict[str, object] = {}
    if config.reply_pair:
        from guardian.detectors.local.reply_pair_train import fit_reply_pair

        model.reply_pair, reply_pair = fit_reply_pair(corpus, ordinary=config.reply_pair_ordinary,
                                                      progress=_pair_progress(progress))
    metrics = calibrate(model, corpus)
    files = training_files(mentalmanip=mentalmanip, conversations=conversations, with_chatbot=with_chatbot)
    model.metrics = metrics
    model.info = {
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "history": history,
        "label_head": label_head,
        "reply_head": reply_head,
        "reply_pair": reply_pair,
        "n_train_bags": len(corpus.train),
        "n_dev_bags": len(corpus.dev),
        "n_turns": int(corpus.data.features.shape[0]),
        "data_sha256": file_sha256(*files),
        "data": [p.name for p in files],
        "python": platform.python_version(),
        "split": "by sha1(seed:id): 20 % test (never read in training), 15 % dev, 65 % train",
    }
    model.save(out)
    return model, metrics


def _pair_progress(progress: Progress | None) -> Callable[[int, int], None] | None:
    """The reply head's fine-tuning steps as one bar of `progress`."""
    if progress is None:
        return None
    report = progress
    return lambda step, total: report("reply-pair fine-tuning", step, total)
