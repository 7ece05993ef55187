"""Training of the window label head: techniques and vulnerabilities from the whole window.

MentalManip labels whole dialogues ("this dialogue uses Accusation and Intimidation"), not
turns. Heads that read one turn (the most suspicious) learned that poorly: technique micro-F1
.32 and vulnerability .37 on the dev part, against .48 / .56 for the dialogue-level model the
turn model replaced. This head reads the window: the mean of its turns' hidden vectors, their
mean weighted by the manipulation logits (a softmax, as the MIL training pools), and the turn
being labelled; one logistic regression per label over those, fitted on the train part's
manipulative MentalManip dialogues (con, and the maj-only ones that train only label heads),
the top turn standing for the dialogue. The manipulation and scam heads are untouched, so no
decision changes. Training only; the run-time half is `model.window_label_logits`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import Bag
from guardian.detectors.local.model import MANIP, TurnModel, window_pool

#: The sources whose bags carry dialogue labels.
LABELLED = ("mentalmanip", "mentalmanip_maj")


def bag_features(model: TurnModel, features: np.ndarray, bags: Sequence[Bag]) -> np.ndarray:
    """[window pool, top turn] hidden features of each bag: what the head sees for the top turn."""
    out = []
    for b in bags:
        hidden = model.hidden(features[b.rows])
        z = (hidden @ model.w2 + model.b2)[:, MANIP]
        out.append(np.concatenate([window_pool(hidden, z), hidden[int(np.argmax(z))]]))
    return np.asarray(out, dtype=np.float32).reshape(len(bags), -1)


def fit_multilabel(
    x: np.ndarray, y: np.ndarray, *, l2: float, seed: int = 17, pos_weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(W, b) of one L2-regularised logistic regression per column of `y` over standardised `x`,
    folded back so that logits = x @ W + b on the raw features. Full-batch L-BFGS: deterministic.
    `pos_weight`: a weight per column on its positives (class weights; measured, not shipped)."""
    import torch

    torch.manual_seed(seed)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-6
    xs = torch.from_numpy(((x - mu) / sd).astype(np.float32))
    ys = torch.from_numpy(y.astype(np.float32))
    w = torch.zeros(x.shape[1], y.shape[1], requires_grad=True)
    b = torch.zeros(y.shape[1], requires_grad=True)
    optimiser = torch.optim.LBFGS([w, b], max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            xs @ w + b, ys, pos_weight=None if pos_weight is None else torch.from_numpy(pos_weight.astype(np.float32))
        ) * ys.shape[1]
        loss = loss + 0.5 * l2 * (w**2).sum()
        loss.backward()
        return loss

    optimiser.step(closure)
    weights = w.detach().numpy() / sd[:, None]
    bias = b.detach().numpy() - (mu / sd) @ w.detach().numpy()
    return weights.astype(np.float32), bias.astype(np.float32)


def fit_label_head(model: TurnModel, corpus: Corpus, *, l2: float, seed: int = 17) -> dict[str, int]:
    """Fit the window label head on the train part into `model`; how many dialogues trained each half."""
    tech_bags = [b for b in corpus.train if b.source in LABELLED and b.techniques is not None]
    vuln_bags = [b for b in corpus.train if b.source in LABELLED and b.vulnerabilities is not None]
    if not tech_bags or not vuln_bags:  # a corpus without labels (a custom CSV): the per-turn heads stay
        return {}
    # The hidden layer as the artifact stores it (float16 first layer): what the head reads at run time,
    # and the same whether the head is fitted right after training or onto a saved artifact.
    stored = dataclasses.replace(model, w1=model.w1.astype(np.float16).astype(np.float32))
    wt, bt = fit_multilabel(bag_features(stored, corpus.data.features, tech_bags),
                            np.array([b.techniques for b in tech_bags]), l2=l2, seed=seed)
    wv, bv = fit_multilabel(bag_features(stored, corpus.data.features, vuln_bags),
                            np.array([b.vulnerabilities for b in vuln_bags]), l2=l2, seed=seed)
    model.label_w = np.hstack([wt, wv])
    model.label_b = np.concatenate([bt, bv])
    return {"technique_dialogues": len(tech_bags), "vulnerability_dialogues": len(vuln_bags)}
