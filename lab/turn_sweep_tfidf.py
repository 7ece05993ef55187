"""Does a TF-IDF block over each turn's words help the turn model? Dev figures with and without."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from guardian.detectors.local.calibration import calibrate, dev_scores
from guardian.detectors.local.corpus import load_corpus
from guardian.detectors.local.train import TrainConfig, fit, log


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    s = np.concatenate([pos, neg])
    ranks = s.argsort().argsort() + 1
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def main() -> None:
    corpus = load_corpus()
    train_rows = np.concatenate([b.rows for b in corpus.train])
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=3, max_features=50_000, sublinear_tf=True,
                                 dtype=np.float32)
    vectorizer.fit([corpus.data.texts[i] for i in np.unique(train_rows)])
    x = vectorizer.transform(corpus.data.texts).tocsr()
    log(f"tfidf {x.shape}")
    corpus = dataclasses.replace(corpus, sparse=x)
    for wd in (1e-4, 1e-2):
        config = dataclasses.replace(TrainConfig(), weight_decay=wd)
        model, history = fit(corpus.data, corpus.train, corpus.dev, config=config, sparse_x=x)
        s = dev_scores(model, corpus)
        mm = np.array(s.kind) == "mentalmanip"
        metrics = calibrate(model, corpus)
        print(json.dumps({"wd": wd, "best_epoch": min(history, key=lambda h: h["dev_loss"])["epoch"],
                          "mm_auc": round(auc(s.manip_logit[mm & s.positive], s.manip_logit[mm & ~s.positive]), 4),
                          "high": metrics["dev_flagged_high"], "medium": metrics["dev_flagged_medium"],
                          "tech": metrics["dev_technique_micro_f1"], "vuln": metrics["dev_vulnerability_micro_f1"]}),
              flush=True)


if __name__ == "__main__":
    main()
