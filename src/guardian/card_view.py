"""A finding card as terminal text: one renderer for `guardian analyze` (its default and
`--explain` output) and the TUI's findings panel, so both show the same card.

Every word from the transcript or a detector goes through `terminal_safe` (control characters
and bidi overrides shown, never obeyed); the plain words come from the package's data.
"""

from __future__ import annotations

from rich.text import Text

from guardian.findings import FindingCard
from guardian.plain_words import StepKind, number, plain_words
from guardian.terminal_text import terminal_safe

BAR_WIDTH = 8


def confidence_bar(score: float, *, width: int = BAR_WIDTH) -> str:
    filled = round(max(0.0, min(1.0, score)) * width)
    return "█" * filled + "░" * (width - filled)


def card_text(card: FindingCard, *, expanded: bool = False, indent: str = "", quote_chars: int = 0) -> Text:
    """The card in a few lines: who and which turn, the shown tactics (bar, score, plain words for
    the first), the quote with its span, what it targets, why it fired; `expanded` adds every
    label's score and the plain words of each tactic and vulnerability. `quote_chars` > 0 cuts a
    long quote for a narrow panel (the full quote is in the expanded card)."""
    words = plain_words()
    out = Text()
    out.append(f"{indent}⚑ turn {card.turn} · ", style="bold red")
    out.append(terminal_safe(card.speaker, one_line=True), style="bold cyan")
    out.append(f" · {'scam request' if card.kind == 'scam' else 'manipulation'} {number(card.score)}\n",
               style="bold red")
    for n, label in enumerate(card.tactics):
        score = card.scores.get(label, 0.0)
        out.append(f"{indent}  {confidence_bar(score)} {number(score)} ", style="red")
        out.append(terminal_safe(_title(label), one_line=True), style="bold")
        line = words.label(label)
        if line and (n == 0 or expanded):
            out.append(f": {line}")
        out.append("\n")
    if card.quote is not None:
        quote = card.quote.quote
        if quote_chars and len(quote) > quote_chars and not expanded:
            quote = quote[: quote_chars - 1] + "…"
        out.append(f"{indent}  “{terminal_safe(quote)}”", style="italic")
        out.append(f" (turn {card.quote.turn}, chars {card.quote.start}–{card.quote.end})\n", style="dim")
    if card.vulnerabilities:
        names = ", ".join(v.value for v in card.vulnerabilities)
        out.append(f"{indent}  targets {names}", style="yellow")
        out.append(f": {words.vulnerability(card.vulnerabilities[0])}\n" if not expanded else "\n")
        if expanded:
            for v in card.vulnerabilities:
                out.append(f"{indent}    {v.value}: {words.vulnerability(v)}\n", style="yellow")
    if card.why:
        out.append(f"{indent}  why: {terminal_safe(card.why)}\n", style="dim")
    if expanded and card.scores:
        scores = ", ".join(f"{_title(k)} {number(v)}" for k, v in sorted(card.scores.items(), key=lambda kv: -kv[1]))
        out.append(f"{indent}  all scores: {terminal_safe(scores)}\n", style="dim")
    out.rstrip()
    return out


def steps_text(kinds: list[StepKind], *, indent: str = "") -> Text:
    """What the person can do, once per kind of flagged turn (sober steps, no phone numbers)."""
    out = Text()
    for kind in dict.fromkeys(kinds):
        heading = {"scam": "If someone asks for codes, passwords or money",
                   "manipulation": "What you can do",
                   "blocked": "About the held-back reply"}[kind]
        out.append(f"{indent}{heading}:\n", style="bold")
        for step in plain_words().next_steps(kind):
            out.append(f"{indent}  • {step}\n")
    out.rstrip()
    return out


def _title(label: str) -> str:
    """A pattern's name in words ("key_phrase" -> "Key phrase"); a technique's name as it is."""
    return label.replace("_", " ").capitalize() if label.islower() else label


__all__ = ["BAR_WIDTH", "card_text", "confidence_bar", "steps_text"]
