"""Refit the reply head (and so the chatbot threshold) onto a turn-model artifact, the rest unchanged.

Why: when only the chatbot exchanges change (round 2 of `data/chatbot/exchanges.jsonl`, issue 19),
only the parts that read them should: the reply head and the chatbot operating point. Retraining the
whole artifact with `guardian train` refits the network too, which is not bit-reproducible on a
loaded 2-core machine, and every per-kind figure would have to be re-measured for a change that
cannot touch it. This loads the artifact, refits the head as `guardian train` does
(`reply.fit_reply_head` with the artifact's `reply_c` and seed), re-runs the dev calibration
(`calibration.calibrate`) for the chatbot threshold, keeps every other calibration value as shipped (printing
how far a re-run would move them) and saves the artifact to `--out`.
With `--pair`, the fine-tuned (reply, request) head (`reply_pair_train.fit_reply_pair`, 5-7 min) is
fitted instead, and the chatbot threshold calibrated on it; the linear head stays as shipped.
`--calibrate-only` fits nothing and re-runs the chatbot calibration alone (after a change to how the heads
combine). `--dialogue` (with `--pair`) lets the pair head join the network outside chatbot threads too
(`reply_pair.dialogue_turn`, its dialogue scale fitted on dev) and keeps the low / medium / high thresholds
that calibration then chooses, under the shipped Platt scales. Usage: python lab/turn_reply_refit.py --artifact src/guardian/resources/turn_model --out DIR [--pair]
[--calibrate-only]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from guardian.corpora.datasets import file_sha256
from guardian.detectors.local.calibration import calibrate
from guardian.detectors.local.corpus import load_corpus
from guardian.detectors.local.model import MANIP, TurnModel
from guardian.detectors.local.reply import fit_reply_head
from guardian.detectors.local.train import training_files

#: What `calibration.calibrate` sets on a model besides the chatbot threshold.
CALIBRATION = ("thresholds", "manip_platt", "scam_platt", "technique_ratio", "vulnerability_ratio")


def calibration(model: TurnModel) -> dict[str, Any]:
    return {name: dict(getattr(model, name)) if name == "thresholds" else getattr(model, name) for name in CALIBRATION}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pair", action="store_true", help="fit the fine-tuned (reply, request) head")
    parser.add_argument("--calibrate-only", action="store_true",
                        help="fit nothing: re-run the chatbot calibration with the artifact's heads as they are")
    parser.add_argument("--head-lr", type=float, help="with --pair: the head's learning rate (default: the recipe's)")
    parser.add_argument("--spoken", type=float, default=0.0,
                        help="with --pair: the share of rows also trained on as speech transcripts write them")
    parser.add_argument("--hard", type=int, default=0,
                        help="with --pair: that many more ordinary turns, those the network scores highest")
    parser.add_argument("--dialogue", action="store_true",
                        help="with --pair: keep the low / medium / high thresholds the dialogue rule calibrates "
                             "(the pair head joins the network outside chatbot threads), with the shipped Platt scales")
    args = parser.parse_args()
    model = TurnModel.load(args.artifact)
    config = model.info.get("config", {})
    # The heads refitted here may read files added after the network was trained (the turn-labelled
    # dialogues), never fewer than it read.
    files = training_files()
    trained_on = list(model.info.get("data") or [])
    if [p.name for p in files][: len(trained_on)] != trained_on:
        raise SystemExit(f"the artifact was trained on {trained_on}, not the default files")
    before = calibration(model)
    corpus = load_corpus(seed=int(config.get("seed", 17)), context=bool(config.get("context", False)))
    if args.calibrate_only:
        fitted = model.info.get("reply_pair" if args.pair else "reply_head", {})
        if args.dialogue and model.reply_pair is not None:
            from guardian.detectors.local.reply_pair_train import dialogue_scale

            model.reply_pair.dialogue_platt = dialogue_scale(model.reply_pair, corpus)
            fitted = {**fitted, "dialogue_platt": model.reply_pair.dialogue_platt}
    elif args.pair:
        import dataclasses

        from guardian.detectors.local.reply_pair_train import PAIR_CONFIG, fit_reply_pair
        from guardian.progress import tqdm_progress

        bar = tqdm_progress("reply head")
        recipe = dataclasses.replace(PAIR_CONFIG, head_lr=args.head_lr) if args.head_lr else PAIR_CONFIG
        # The ordinary turns the network scores highest are the hard negatives (`--hard`).
        model.reply_pair, fitted = fit_reply_pair(corpus, config=recipe, spoken_share=args.spoken, hard=args.hard,
                                                  hardness=lambda x: model.logits(x)[:, MANIP],
                                                  progress=lambda step, total: bar("fine-tuning", step, total))
    else:
        fitted = fit_reply_head(model, corpus, c=float(config.get("reply_c", 1.0)), seed=int(config.get("seed", 17)))
    if not args.dialogue and model.reply_pair is not None:
        model.reply_pair.dialogue_platt = None  # the head stays in chatbot threads
    metrics = calibrate(model, corpus, refit_platt=not args.dialogue)
    after = calibration(model)
    # Everything but the chatbot threshold is kept as shipped: re-embedding the same turns on another day
    # moves the dev scores in the fourth decimal, and with them the Platt fits; that drift is reported.
    drift = {k: (before[k], after[k]) for k in before if k != "thresholds" and before[k] != after[k]}
    drift.update({f"threshold_{k}": (v, after["thresholds"][k]) for k, v in before["thresholds"].items()
                  if k != "assistant" and v != after["thresholds"][k]})
    kept = dict(after["thresholds"]) if args.dialogue else {**before["thresholds"], "assistant": after["thresholds"]["assistant"]}
    for name, value in {**before, "thresholds": kept}.items():
        setattr(model, name, value)
    model.scam_threshold = model.thresholds["medium"]
    model.metrics = {**model.metrics, "thresholds": dict(model.thresholds),
                     "dev_flagged_assistant": metrics["dev_flagged_assistant"]}
    if args.dialogue:
        model.metrics = {**metrics, "thresholds": dict(model.thresholds)}
    model.info = {**model.info, ("reply_pair" if args.pair else "reply_head"): fitted, "n_dev_bags": len(corpus.dev), "n_train_bags": len(corpus.train),
                  "n_turns": int(corpus.data.features.shape[0]), "data_sha256": file_sha256(*files),
                  "data": [p.name for p in files]}
    model.save(args.out)
    print(json.dumps({"reply_pair" if args.pair else "reply_head": fitted, "assistant_threshold": model.thresholds.get("assistant"), "drift": drift,
                      "dev_flagged_assistant": metrics.get("dev_flagged_assistant")}, indent=1))


if __name__ == "__main__":
    main()
