"""`guardian analyze`: assess every turn of a transcript, then render.

Each turn is assessed as the last turn of its window (the turns before it, up
to the window size), exactly as the live monitor would see it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.text import Text

from guardian.card_view import card_text, steps_text
from guardian.config import settings
from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.detectors.base import Detector
from guardian.errors import InputError
from guardian.findings import Assessment, FindingCard
from guardian.monitor import risk_series
from guardian.plain_words import StepKind, number, plain_words
from guardian.readers import configured_limits, megabytes, parse_transcript, read_transcript
from guardian.runner import Runner
from guardian.summary import ConversationSummary, summarize
from guardian.terminal_text import terminal_safe


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    JSONL = "jsonl"
    MARKDOWN = "markdown"


#: Version of the `--format json` document: 2 when findings became the assessed turn's own
#: (earlier turns' in `history`), with the turn's `verdict` and `card` and the `summary`.
SCHEMA_VERSION: Literal[2] = 2


class AnalyzeReport(BaseModel):
    """The `--format json` document (schema: src/guardian/schema/analyze.schema.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[2] = SCHEMA_VERSION
    guardian_version: str
    conversation: Conversation
    detectors: tuple[str, ...]
    assessments: tuple[Assessment, ...]
    risk: tuple[float, ...] = Field(default=(), description="the conversation's risk after each turn, as `watch` keeps it")
    summary: ConversationSummary | None = None
    next_steps: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="what the person can do, by the kinds of the flagged turns' cards"
    )


def summary_of(conversation: Conversation, assessments: Sequence[Assessment]) -> ConversationSummary:
    """The per-speaker summary and the risk now, from the cards (`guardian.summary`)."""
    risk = risk_series(assessments)
    return summarize(
        conversation.id,
        conversation.turns,
        (a.card for a in assessments if a.card is not None),
        risk=risk[-1] if risk else 0.0,
        peak_risk=max(risk, default=0.0),
    )


def kinds_of(assessments: Sequence[Assessment]) -> list[StepKind]:
    """The kinds of the flagged turns (scam first: its steps are the most urgent), each once."""
    kinds = {a.card.kind for a in assessments if a.card is not None}
    return [k for k in ("scam", "manipulation") if k in kinds]


def analyze_report(
    conversation: Conversation,
    detectors: Sequence[Detector],
    assessments: Sequence[Assessment],
    *,
    guardian_version: str,
) -> AnalyzeReport:
    """The `--format json` document: one builder, so `analyze` and the service's `POST /v1/screen`
    answer the same fields (risk series, summary, next steps), never one of them a thinner copy."""
    return AnalyzeReport(
        guardian_version=guardian_version,
        conversation=conversation,
        detectors=tuple(d.name for d in detectors),
        assessments=tuple(assessments),
        risk=tuple(round(r, 6) for r in risk_series(assessments)),
        summary=summary_of(conversation, assessments),
        next_steps={k: plain_words().next_steps(k) for k in kinds_of(assessments)},
    )


def load_input(file: str, *, input_format: str) -> Conversation:
    max_bytes, max_turn_chars = configured_limits()
    if file == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise InputError(
                f"standard input is larger than {megabytes(max_bytes)}; transcripts are read up to "
                f"{megabytes(max_bytes)} (split it, or raise GUARDIAN_MAX_TRANSCRIPT_MB)",
                source="<stdin>",
            )
        from guardian.readers import decode

        return parse_transcript(
            decode(data, source="<stdin>"),
            input_format=input_format,
            source="<stdin>",
            conversation_id="stdin",
            max_turn_chars=max_turn_chars,
        )
    return read_transcript(file, input_format=input_format, max_bytes=max_bytes, max_turn_chars=max_turn_chars)


#: Windows handed to a detector's `analyze_batch` at once (the local model encodes their new turns in one pass).
BATCH = 64


def assess_turns(
    conversation: Conversation,
    detectors: Sequence[Detector],
    *,
    window: int,
    progress: Callable[[int], None] | None = None,
) -> list[Assessment]:
    """Per-turn assessments, by the one runner (`guardian.runner`): a failing detector is
    recorded in the assessment, never raised; a quote not in the transcript is dropped.

    Each detector sees the windows in batches (`Detector.analyze_batch`); `progress` is
    called with the number of turns finished as each batch completes.
    """
    runner = Runner(detectors)
    turns = conversation.turns
    merged: list[Assessment] = []
    for first in range(0, len(turns), BATCH):
        chunk = turns[first : first + BATCH]
        merged.extend(runner.assess_batch([conversation.window(window, ending_at=turn.index) for turn in chunk]))
        if progress is not None:
            progress(len(merged))
    return merged


def run_analyze(
    file: str,
    *,
    output_format: OutputFormat,
    detectors: str | None,
    input_format: str,
    window: int | None,
    explain: bool = False,
) -> None:
    from guardian import __version__

    conversation = load_input(file, input_format=input_format)
    names = detectors.split(",") if detectors else registry.default_names()
    active = registry.create_many(names)
    with _progress_bar(len(conversation.turns)) as progress:
        assessments = assess_turns(
            conversation, active, window=window or settings().monitor.window, progress=progress
        )
    console = _ReaderConsole(soft_wrap=True, highlight=False)
    if output_format is OutputFormat.JSON:
        report = analyze_report(conversation, active, assessments, guardian_version=__version__)
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    elif output_format is OutputFormat.JSONL:
        for a in assessments:
            sys.stdout.write(a.model_dump_json() + "\n")
    elif output_format is OutputFormat.MARKDOWN:
        sys.stdout.write(render_markdown(conversation, assessments))
    else:
        render_text(console, conversation, assessments, explain=explain)


class _ReaderConsole(Console):
    """A console whose reader may leave (`| head -1`): that ends the output quietly with exit 0
    (the CLI's BrokenPipeError handling), where Rich's default exits 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


@contextmanager
def _progress_bar(total: int) -> Iterator[Callable[[int], None] | None]:
    """A bar on stderr for long transcripts in a terminal; nothing in pipes, CI or short files."""
    if total < 2 * BATCH or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc="assessing turns", unit="turn", file=sys.stderr, leave=False) as bar:

        def advance(done: int) -> None:
            bar.update(done - bar.n)

        yield advance


def highlighted(text: str, spans: Sequence[tuple[int, int]], *, style: str = "bold black on yellow") -> Text:
    out = Text(text)
    for start, end in spans:
        out.stylize(style, start, end)
    return out


def _spans_by_turn(assessments: Sequence[Assessment]) -> dict[int, list[tuple[int, int]]]:
    """Every quoted span of each turn's own findings, grouped by the turn it quotes (one pass:
    scanning every finding for every turn made long transcripts quadratic)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for assessment in assessments:
        for finding in assessment.findings:
            for e in finding.evidence:
                spans.setdefault(e.turn, []).append((e.start, e.end))
    return spans


def not_flagged_line(assessment: Assessment) -> str | None:
    """Why an assessed turn is not flagged, with its numbers; None when there is nothing to say."""
    v = assessment.verdict
    if v is not None and v.turn == assessment.turn:
        rule = f"the {v.sensitivity or 'configured'} threshold {number(v.threshold)}"
        return f"turn {v.turn} scored {number(v.score)}, under {rule}: not flagged"
    if assessment.probability is not None:
        return f"p(manipulation)={assessment.probability:.2f}, not flagged on this turn"
    return None


def _print(console: Console, text: Text) -> None:
    """Print one line whose words come from the transcript: control characters and bidi
    overrides are shown, never sent to the terminal (same length, so highlights stay put)."""
    text.plain = terminal_safe(text.plain)
    console.print(text)


def render_text(
    console: Console, conversation: Conversation, assessments: Sequence[Assessment], *, explain: bool = False
) -> None:
    """The transcript with each flagged turn's card under it (expanded with `explain`), what was
    noted on the other turns, then the per-speaker summary and what the person can do."""
    spans = _spans_by_turn(assessments)
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        line = Text(f"[{turn.index}] ", style="dim")
        line.append(f"{turn.speaker}: ", style="bold cyan")
        line.append_text(highlighted(turn.text, spans.get(turn.index, [])))
        _print(console, line)
        if assessment.not_assessed is not None:
            _print(console, Text(f"    not assessed: {assessment.not_assessed}", style="dim"))
        if assessment.card is not None:
            console.print(card_text(assessment.card, expanded=explain, indent="    "))
        else:
            quiet = not_flagged_line(assessment)
            if quiet is not None:
                _print(console, Text(f"    {quiet}", style="dim"))
            for finding in assessment.findings:
                quote = " / ".join(f"“{e.quote}” (turn {e.turn})" for e in finding.evidence)
                msg = Text("    · noted: ", style="dim")
                msg.append(f"{finding.label} {finding.score:.2f}", style="bold")
                msg.append(f" [{finding.detector}] ", style="dim")
                msg.append(quote)
                _print(console, msg)
        if explain and assessment.history:
            earlier = sorted({f.turn for f in assessment.history if f.turn is not None})
            _print(console, Text(f"    (window still holds findings of turns {', '.join(map(str, earlier))})",
                                 style="dim"))
        for intent in (i for i in assessment.intents if not i.abstained):
            _print(console, Text(f"    intent: {intent.face_act.value} — {intent.intention}", style="blue"))
        for error in assessment.errors:
            _print(console, Text(f"    ! {error.detector} {error.kind}: {error.message}", style="bold yellow"))
    cards = sum(1 for a in assessments if a.card is not None)
    summary = summary_of(conversation, assessments)
    _print(console, Text(f"{len(conversation)} turns, {cards} flagged turn{'' if cards == 1 else 's'}", style="bold"))
    _print(console, Text(summary.line(), style="bold"))
    kinds = kinds_of(assessments)
    if kinds:
        console.print(steps_text(kinds))


def render_markdown(conversation: Conversation, assessments: Sequence[Assessment]) -> str:
    """The analysis as Markdown; every word from the transcript or a detector is escaped
    (`markdown_text`), so a turn cannot add markup, HTML, links or lines of its own."""
    from guardian.report import markdown_text as md

    summary = summary_of(conversation, assessments)
    lines = [f"# guardian analysis: {md(conversation.id)}", "", f"**Summary:** {md(summary.line())}", ""]
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        lines.append(f"**[{turn.index}] {md(turn.speaker)}:** {md(turn.text)}")
        lines.append("")
        if assessment.not_assessed is not None:
            lines.append(f"- not assessed: {md(assessment.not_assessed)}")
        card = assessment.card
        if card is not None:
            lines.extend(markdown_card(card))
        else:
            quiet = not_flagged_line(assessment)
            if quiet is not None:
                lines.append(f"- {md(quiet)}")
            for f in assessment.findings:
                quotes = "; ".join(f"“{md(e.quote)}” (turn {e.turn}, chars {e.start}–{e.end})" for e in f.evidence)
                lines.append(f"- noted: **{md(f.label)}** {f.score:.2f} ({md(f.detector)}): {quotes}")
        for i in (i for i in assessment.intents if not i.abstained):
            lines.append(f"- intent: `{i.face_act.value}` {md(i.intention)}")
        for e in assessment.errors:
            lines.append(f"- ⚠ {md(e.detector)} {e.kind}: {md(e.message)}")
        lines.append("")
    for kind in kinds_of(assessments):
        lines.append("**What you can do:**" if kind == "manipulation" else "**If someone asks for codes or money:**")
        lines.extend(f"- {md(step)}" for step in plain_words().next_steps(kind))
        lines.append("")
    return "\n".join(lines)


def markdown_card(card: FindingCard) -> list[str]:
    """A card as Markdown bullets, every value escaped."""
    from guardian.report import markdown_text as md

    words = plain_words()
    tactics = "; ".join(f"**{md(t)}** {number(card.scores.get(t, 0.0))}: {md(words.label(t))}" for t in card.tactics)
    out = [f"- ⚑ flagged: {md(card.speaker)}, {md(card.kind)} {number(card.score)}: {tactics}"]
    if card.quote is not None:
        q = card.quote
        out.append(f"  - quote: “{md(q.quote)}” (turn {q.turn}, chars {q.start}–{q.end})")
    if card.vulnerabilities:
        v = card.vulnerabilities[0]
        names = ", ".join(x.value for x in card.vulnerabilities)
        out.append(f"  - targets {md(names)}: {md(words.vulnerability(v))}")
    if card.why:
        out.append(f"  - why: {md(card.why)}")
    return out
