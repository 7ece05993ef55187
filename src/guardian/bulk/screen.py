"""The per-conversation work every engine runs: `guardian analyze`'s path, one row out.

A `Screener` holds the detectors (loaded once per worker process or Ray actor) and
turns `Item`s into `Screened` rows with `guardian.analyze.assess_turns`, the very
function `guardian analyze FILE` calls, so a row says what that command says.
Nothing raised for one conversation reaches the others: it becomes that
conversation's error row.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from guardian.bulk.inputs import Item
from guardian.bulk.rows import Screened, conversation_row, error_row, turn_rows


@dataclass(frozen=True, slots=True)
class ScreenOptions:
    """What every worker must agree on, resolved once by the driver (settings may differ per node)."""

    detectors: tuple[str, ...]
    window: int
    per_turn: bool = False


def resolve_options(*, detectors: str | None, window: int | None, per_turn: bool) -> ScreenOptions:
    """The driver's options: `--detectors` or the registry's conversation defaults, `--window` or the setting."""
    from guardian.config import settings
    from guardian.detectors import registry

    names = [n.strip() for n in detectors.split(",") if n.strip()] if detectors else None
    return ScreenOptions(
        detectors=tuple(names or registry.default_names(purpose="conversation")),
        window=window or settings().monitor.window,
        per_turn=per_turn,
    )


def _forget_other_conversations() -> None:
    """Clear the shared sentence encoder's text -> vector cache before each conversation.

    A cached vector was computed in some earlier batch, and a vector depends slightly on
    its batch (padding): with the cache kept, a row depended on which conversations the
    same worker had screened before (4 of 300 probabilities differed by ~1e-3 between
    `--jobs 2` and Ray). Cleared, every conversation is screened as `guardian analyze FILE`
    screens it in a fresh process, whichever worker gets it.
    """
    module = sys.modules.get("guardian.encoding.sentence_encoder")
    if module is not None:
        module.shared_encoder().clear()


class Screener:
    """Detectors loaded once; `screen_batch` is all an engine calls."""

    def __init__(self, options: ScreenOptions) -> None:
        from guardian._env import apply_process_defaults
        from guardian.detectors import registry

        apply_process_defaults()  # a worker process is guardian's own: one torch thread, offline
        self.options = options
        self.detectors = registry.create_many(list(options.detectors))
        for detector in self.detectors:
            detector.warm_up()

    def screen(self, item: Item) -> Screened:
        from guardian.analyze import assess_turns

        if item.conversation is None:
            return Screened(row=error_row(item.id, item.error or "no conversation", label=item.label))
        conversation = item.conversation
        _forget_other_conversations()
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
        return [self.screen(item) for item in items]
