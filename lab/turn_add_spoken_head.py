"""Issue 19: give a turn-model artifact the pair head for speech transcripts (`register`).

The donor is an artifact whose pair head was fine-tuned on written turns and their copies as a
transcript writes them, over the same network:
    python lab/turn_reply_refit.py --artifact src/guardian/resources/turn_model --out DONOR --pair --dialogue --spoken 0.5
Its head (weights, chatbot and dialogue scales) becomes `reply_pair_spoken` of the artifact; nothing else
changes (the thresholds were chosen on the dev part's written turns, which the written head reads).
A re-run of the donor's fine-tuning gives a close head, not the same bytes (2-core torch).
Usage: python lab/turn_add_spoken_head.py --artifact DIR --donor DONOR --out OUT
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from guardian.detectors.local.model import WEIGHTS, TurnModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--donor", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    digest = {d: hashlib.sha256((d / WEIGHTS).read_bytes()).hexdigest() for d in (args.artifact, args.donor)}
    if digest[args.artifact] != digest[args.donor]:
        raise SystemExit("the donor was fitted over another network: refit it from this artifact")
    model, donor = TurnModel.load(args.artifact), TurnModel.load(args.donor)
    if donor.reply_pair is None or donor.reply_pair.dialogue_platt is None:
        raise SystemExit("the donor has no pair head with a dialogue scale")
    model.reply_pair_spoken = donor.reply_pair
    model.info = {**model.info, "reply_pair_spoken": donor.info.get("reply_pair", {})}
    model.save(args.out)
    print(json.dumps({"reply_pair_spoken": model.info["reply_pair_spoken"],
                      "dialogue_platt": donor.reply_pair.dialogue_platt}, indent=1))


if __name__ == "__main__":
    main()
