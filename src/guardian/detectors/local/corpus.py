"""What a training run of the turn model reads: the corpora embedded once, as bags, split into parts.

Parts by `corpora.conversations.split_of` (and the same hash for MentalManip ids): train fits the
weights, dev picks the epoch, the calibration and the thresholds; test is never read here. The
turns' vectors are kept in a disk cache (`embedding_cache`), so a second run embeds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardian import locations
from guardian.corpora.conversations import LabelledConversation
from guardian.corpora.datasets import LabelledDialogue
from guardian.detectors.local.data import Bag, TrainingSet, build
from guardian.encoding.sentence_encoder import MODEL_NAME, SentenceEncoder
from guardian.progress import Progress

MAX_TOKENS = 128


def chatbot_exchanges_path() -> Path:
    """`data/chatbot/exchanges.jsonl`: hand-written user -> assistant exchanges, manipulative and benign replies."""
    from guardian.corpora.conversations import conversations_dir

    return conversations_dir().parent / "chatbot" / "exchanges.jsonl"


def load_chatbot_exchanges(path: Path | None = None) -> list[LabelledConversation]:
    """The chatbot exchanges (kind "chatbot"); none when the file is absent (an installed copy)."""
    from guardian.corpora.conversations import load_conversations

    path = path or chatbot_exchanges_path()
    return load_conversations(path, kind="chatbot") if path.is_file() else []


def dialogue_turns_path() -> Path:
    """`data/dialogues/turns.jsonl`: two-person dialogues whose manipulative turns are labelled one by one."""
    from guardian.corpora.conversations import conversations_dir

    return conversations_dir().parent / "dialogues" / "turns.jsonl"


def load_dialogue_turns(path: Path | None = None) -> list[LabelledConversation]:
    """The turn-labelled dialogues (kind "dialogue"); none when the file is absent (an installed copy)."""
    from guardian.corpora.conversations import load_conversations

    path = path or dialogue_turns_path()
    return load_conversations(path, kind="dialogue") if path.is_file() else []


def embedding_cache() -> Path:
    return locations.cache_dir() / "turn_model_embeddings" / f"{MODEL_NAME}-{MAX_TOKENS}.npz"


def training_encoder() -> SentenceEncoder:
    """An encoder whose cache holds the whole corpus, preloaded from disk."""
    encoder = SentenceEncoder(max_tokens=MAX_TOKENS, cache_size=1_000_000, batch_size=64)
    encoder.preload(embedding_cache())
    return encoder


@dataclass(frozen=True, slots=True)
class Corpus:
    """What a training run reads, split into parts."""

    data: TrainingSet
    train: list[Bag]
    dev: list[Bag]
    #: Sparse features (TF-IDF of each turn) when the model has a sparse block.
    sparse: Any = None


def load_corpus(
    *,
    seed: int = 17,
    mentalmanip: Sequence[Path] | None = None,
    conversations: Sequence[Path] | None = None,
    progress: Progress | None = None,
    context: bool = False,
    hints: bool = True,
    chatbot: Sequence[LabelledConversation] | None = None,
    dialogues: Sequence[LabelledConversation] | None = None,
) -> Corpus:
    """MentalManip and conversations of other kinds, train and dev parts only.

    By default MentalManip con trains every head and the maj-only dialogues the label heads
    (majority labels made the binary decision worse, docs/model-card.md); given CSVs train
    every head (merged by id, first file wins). Conversations: `data/conversations/*.jsonl`.
    Chatbot exchanges (`load_chatbot_exchanges` by default): the manipulative assistant reply is a
    positive turn, every other turn a negative; turn-labelled dialogues (`load_dialogue_turns` by
    default) likewise, their labelled turns positive.
    """
    from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
    from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
    from guardian.detectors.local.augment import key_phrase_hint, reframed_pairs

    if mentalmanip:
        seen: dict[str, LabelledDialogue] = {}
        for path in mentalmanip:
            for d in load_mentalmanip(path):
                seen.setdefault(d.id, d)
        con, maj_only = list(seen.values()), []
    else:
        con = load_mentalmanip(mentalmanip_path("con"))
        con_ids = {d.id for d in con}
        maj_only = [d for d in load_mentalmanip(mentalmanip_path("maj")) if d.id not in con_ids]
    files = sorted(conversations_dir().glob("*.jsonl")) if conversations is None else list(conversations)
    others = [c for f in files for c in load_conversations(f)]

    def part(i: str) -> str:
        return split_of(i, seed=seed)

    keep = ("train", "dev")
    con = [d for d in con if part(d.id) in keep]
    maj_only = [d for d in maj_only if part(d.id) == "train"]
    others = [c for c in others if part(c.id) in keep]
    exchanges = [c for c in (load_chatbot_exchanges() if chatbot is None else chatbot) if part(c.id) in keep]
    exchanges += [c for c in (load_dialogue_turns() if dialogues is None else dialogues) if part(c.id) in keep]
    encoder = training_encoder()
    texts = [t.text for d in (*con, *maj_only) for t in d.conversation.turns]
    texts += [t.text for c in (*others, *exchanges) for t in c.conversation.turns]

    def embed_progress(done: int, total: int) -> None:
        if progress is not None:
            progress("embedding turns", done, total)

    encoder.encode(list(dict.fromkeys(texts)), progress=embed_progress)
    encoder.persist(embedding_cache())
    pairs = reframed_pairs([d for d in con if part(d.id) == "train"], [c for c in others if part(c.id) == "train"],
                           seed=seed) if hints else []
    data = build(dialogues=con, label_only=maj_only, conversations=others, embed=encoder.encode,
                 context=context, hint=key_phrase_hint if hints else None, pairs=pairs,
                 exchanges=exchanges)
    train = [b for b in data.bags if part(b.conversation_id) == "train"]
    dev = [b for b in data.bags if part(b.conversation_id) == "dev"]
    return Corpus(data=data, train=train, dev=dev)
