"""The per-conversation work every engine runs: `guardian analyze`'s path, one row out.

A `Screener` holds the detectors (loaded once per worker process or Ray actor) and
turns `Item`s into `Screened` rows with `guardian.analyze.assess_turns`, the very
function `guardian analyze FILE` calls, so a row says what that command says.
Nothing raised for one conversation reaches the others: it becomes that
conversation's error row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from guardian.bulk.inputs import Item
from guardian.bulk.rows import Screened, conversation_row, error_row, turn_rows
from guardian.conversation import Conversation
from guardian.detectors.base import Detector

#: Conversations screened together by every engine: their turns are encoded in one pass (`_prefetch`).
BATCH = 64


@dataclass(frozen=True, slots=True)
class ScreenOptions:
    """What every worker must agree on, resolved once by the driver (settings may differ per node)."""

    detectors: tuple[str, ...]
    window: int
    per_turn: bool = False
    #: The sentence encoder's precision on every worker (GUARDIAN_ENCODER_PRECISION on the driver, e.g. "int8":
    #: docs/bulk.md); None leaves each worker's default (bfloat16 where the CPU has it, else float32).
    encoder_precision: str | None = None


def resolve_options(*, detectors: str | None, window: int | None, per_turn: bool) -> ScreenOptions:
    """The driver's options: `--detectors` or the registry's bulk defaults, `--window` or the setting."""
    from guardian.config import settings
    from guardian.detectors import registry
    from guardian.encoding.sentence_encoder import precision_setting

    names = [n.strip() for n in detectors.split(",") if n.strip()] if detectors else None
    return ScreenOptions(
        detectors=tuple(names or registry.default_names(purpose="bulk")),
        window=window or settings().monitor.window,
        per_turn=per_turn,
        encoder_precision=precision_setting(),
    )


#: Detectors that read turns through the process's shared sentence encoder (`shared_encoder`).
ENCODER_USERS = frozenset({"local", "intent"})
#: At most this many texts are encoded ahead of a batch (the shared encoder's cache holds 8,192).
PREFETCH_TEXTS = 4096


def _prefetch(detectors: Sequence[Detector], conversations: Sequence[Conversation]) -> None:
    """Encode every turn of the batch's conversations in one call, each distinct text once, then
    the sentences the local model may quote (`prefetch_quotes`).

    Why: the detectors then find every vector they ask for in the shared encoder's cache. One call
    over many conversations batches texts of equal token count together (a conversation alone has
    a few texts of as many lengths), and a text repeated across conversations ("Okay.") is encoded
    once. The rows do not change: a vector is computed unpadded, so it is the same whatever else
    shares its batch (`SentenceEncoder._embed`), and a cached vector is the one the detector would
    compute (tests/bulk: `test_the_batched_path_gives_the_per_window_rows`).
    """
    from guardian.encoding.sentence_encoder import shared_encoder

    group: list[Conversation] = []
    size = 0
    for conversation in [*conversations, None]:
        if conversation is None or (group and size + len(conversation.turns) > PREFETCH_TEXTS):
            shared_encoder().encode(list(dict.fromkeys(t.text for c in group for t in c.turns))[:PREFETCH_TEXTS])
            for detector in detectors:
                prefetch_quotes = getattr(detector, "prefetch_quotes", None)
                if prefetch_quotes is not None:
                    prefetch_quotes(group)
            group, size = [], 0
        if conversation is not None:
            group.append(conversation)
            size += len(conversation.turns)


class Screener:
    """Detectors loaded once; `screen_batch` is all an engine calls."""

    def __init__(self, options: ScreenOptions) -> None:
        from guardian._env import apply_process_defaults
        from guardian.detectors import registry

        apply_process_defaults()  # a worker process is guardian's own: one torch thread, offline
        self.options = options
        if any(name in ENCODER_USERS for name in options.detectors):
            from guardian.encoding.sentence_encoder import parse_precision, use_shared_precision

            # The driver's choice, not this process's environment: every worker encodes alike.
            use_shared_precision(parse_precision(options.encoder_precision))
        self.detectors = registry.create_many(list(options.detectors))
        for detector in self.detectors:
            detector.warm_up()

    def screen(self, item: Item) -> Screened:
        from guardian.analyze import assess_turns

        if item.conversation is None:
            return Screened(row=error_row(item.id, item.error or "no conversation", label=item.label))
        conversation = item.conversation
        try:
            assessments = assess_turns(conversation, self.detectors, window=self.options.window)
            row = conversation_row(
                conversation, assessments, label=item.label, detectors=[d.name for d in self.detectors]
            )
            turns = turn_rows(conversation, assessments) if self.options.per_turn else ()
        except Exception as exc:  # one conversation's failure is its own error row, never a lost batch
            return Screened(row=error_row(item.id, f"{type(exc).__name__}: {exc}", label=item.label))
        return Screened(row=row, turns=turns)

    def screen_batch(self, items: Sequence[Item]) -> list[Screened]:
        """The items' rows, in order; their turns are encoded together first (`_prefetch`)."""
        return list(self.screen_each(items))

    def screen_each(self, items: Sequence[Item]) -> Iterator[Screened]:
        """`screen_batch`, each row as soon as it is screened (`--jobs 1` writes them as they come)."""
        if any(d.name in ENCODER_USERS for d in self.detectors):
            try:
                _prefetch(self.detectors, [i.conversation for i in items if i.conversation is not None])
            except Exception:  # only a head start: each conversation's own screening reports the failure
                pass
        for item in items:
            yield self.screen(item)
