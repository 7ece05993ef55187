"""Embed every turn of the training corpora once (MiniLM, disk cache) so turn-model runs start fast."""

from __future__ import annotations

import sys
import time

from guardian.corpora.conversations import conversations_dir, load_conversations
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.detectors.local.corpus import (
    embedding_cache,
    load_chatbot_exchanges,
    training_encoder,
)


def main() -> None:
    texts: list[str] = []
    for d in load_mentalmanip(mentalmanip_path("maj")):
        texts += [t.text for t in d.conversation.turns]
    for f in sorted(conversations_dir().glob("*.jsonl")):
        for c in load_conversations(f):
            texts += [t.text for t in c.conversation.turns]
    texts += [t.text for c in load_chatbot_exchanges() for t in c.conversation.turns]
    unique = list(dict.fromkeys(texts))
    print(f"{len(texts)} turns, {len(unique)} unique", file=sys.stderr)
    encoder = training_encoder()
    started = time.perf_counter()
    step = 4096
    for i in range(0, len(unique), step):
        encoder.encode(unique[i : i + step])
        encoder.persist(embedding_cache())
        rate = (i + step) / (time.perf_counter() - started)
        print(f"{min(i + step, len(unique))}/{len(unique)} ({rate:.0f}/s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
