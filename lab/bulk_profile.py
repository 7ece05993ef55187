"""Where a bulk run's time goes: CPU seconds per part of screening MentalManip dialogues (issue 23).

Screens `--n` dialogues the way `guardian analyze ARCHIVE --out` does (batches of `guardian.bulk.screen.BATCH`)
and splits the CPU time into: encoding the turns (one pass per batch), encoding the sentences the local
model may quote, and assessing every turn in its window (detectors, language check, merging). With
`--profile` it prints cProfile's top functions instead (CPU time; the profiler inflates pure-Python
parts several-fold, so compare its shares with the split above).

    .venv/bin/python lab/bulk_profile.py --n 256 --detectors keyphrases,local
    GUARDIAN_ENCODER_PRECISION=int8 .venv/bin/python lab/bulk_profile.py --n 256   # the opt-in int8 encoder

Run it through this script, not by importing guardian first: it sets the thread defaults before numpy
loads. With two OpenBLAS threads on a busy 2-core machine, the turn model's small matrix products took
~100 ms instead of ~2.5 ms (guardian's own processes set OMP_NUM_THREADS=1 at start).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy: see the docstring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="dialogues")
    parser.add_argument("--start", type=int, default=1000, help="first MentalManip dialogue")
    parser.add_argument("--detectors", default="keyphrases,local")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions instead")
    args = parser.parse_args()

    from guardian.analyze import assess_turns
    from guardian.bulk.inputs import Item
    from guardian.bulk.screen import BATCH, Screener, ScreenOptions
    from guardian.corpora.datasets import load_mentalmanip
    from guardian.encoding.sentence_encoder import shared_encoder
    from guardian.language import warm_up

    conversations = [d.conversation for d in load_mentalmanip()[args.start : args.start + args.n]]
    screener = Screener(ScreenOptions(detectors=tuple(args.detectors.split(",")), window=10))
    warm_up()
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile(time.process_time)
        profile.enable()
        for k in range(0, len(conversations), BATCH):
            screener.screen_batch([Item(c.id, conversation=c) for c in conversations[k : k + BATCH]])
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return
    cpu = {"encode_turns": 0.0, "encode_quotes": 0.0, "assess": 0.0}
    quoting = [d for d in screener.detectors if hasattr(d, "prefetch_quotes")]
    for k in range(0, len(conversations), BATCH):
        part = conversations[k : k + BATCH]
        began = time.process_time()
        shared_encoder().encode(list(dict.fromkeys(t.text for c in part for t in c.turns)))
        cpu["encode_turns"] += time.process_time() - began
        began = time.process_time()
        for detector in quoting:
            detector.prefetch_quotes(part)
        cpu["encode_quotes"] += time.process_time() - began
        began = time.process_time()
        for conversation in part:
            assess_turns(conversation, screener.detectors, window=10)
        cpu["assess"] += time.process_time() - began
    total = sum(cpu.values())
    print(json.dumps({
        "dialogues": len(conversations),
        "detectors": args.detectors.split(","),
        "encoder_precision": shared_encoder().precision,
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "share": {k: round(v / total, 2) for k, v in cpu.items()},
        "dialogues_per_cpu_s": round(len(conversations) / total, 1),
        "load_average": round(os.getloadavg()[0], 1),
    }))


if __name__ == "__main__":
    main()
