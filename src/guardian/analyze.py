"""`guardian analyze`: assess every turn of a transcript, then render.

Each turn is assessed as the last turn of its window (the turns before it, up
to the window size), exactly as the live monitor would see it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.text import Text

from guardian.config import settings
from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.detectors.base import Detector
from guardian.errors import InputError
from guardian.findings import Assessment
from guardian.readers import configured_limits, megabytes, parse_transcript, read_transcript
from guardian.runner import Runner
from guardian.terminal_text import terminal_safe


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    JSONL = "jsonl"
    MARKDOWN = "markdown"


class AnalyzeReport(BaseModel):
    """The `--format json` document (schema: src/guardian/schema/analyze.schema.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    guardian_version: str
    conversation: Conversation
    detectors: tuple[str, ...]
    assessments: tuple[Assessment, ...]


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
        report = AnalyzeReport(
            guardian_version=__version__,
            conversation=conversation,
            detectors=tuple(d.name for d in active),
            assessments=tuple(assessments),
        )
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    elif output_format is OutputFormat.JSONL:
        for a in assessments:
            sys.stdout.write(a.model_dump_json() + "\n")
    elif output_format is OutputFormat.MARKDOWN:
        sys.stdout.write(render_markdown(conversation, assessments))
    else:
        render_text(console, conversation, assessments)


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
    """Every quoted span, grouped by the turn it quotes (one pass: scanning every finding for
    every turn made long transcripts quadratic)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for assessment in assessments:
        for finding in assessment.findings:
            for e in finding.evidence:
                spans.setdefault(e.turn, []).append((e.start, e.end))
    return spans


def _print(console: Console, text: Text) -> None:
    """Print one line whose words come from the transcript: control characters and bidi
    overrides are shown, never sent to the terminal (same length, so highlights stay put)."""
    text.plain = terminal_safe(text.plain)
    console.print(text)


def render_text(console: Console, conversation: Conversation, assessments: Sequence[Assessment]) -> None:
    spans = _spans_by_turn(assessments)
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        line = Text(f"[{turn.index}] ", style="dim")
        line.append(f"{turn.speaker}: ", style="bold cyan")
        line.append_text(highlighted(turn.text, spans.get(turn.index, [])))
        _print(console, line)
        if assessment.not_assessed is not None:
            _print(console, Text(f"    not assessed: {assessment.not_assessed}", style="dim"))
        if assessment.probability is not None:
            verdict = "MANIPULATIVE" if assessment.decision else "not manipulative"
            _print(console, Text(f"    p(manipulation)={assessment.probability:.2f}  {verdict}", style="magenta"))
        for finding in assessment.findings:
            quote = " / ".join(f"“{e.quote}” (turn {e.turn})" for e in finding.evidence)
            msg = Text("    ⚑ ", style="red")
            msg.append(f"{finding.label} {finding.score:.2f}", style="bold red")
            msg.append(f" [{finding.detector}] ", style="dim")
            msg.append(quote)
            if finding.vulnerabilities:
                msg.append(f" → targets {', '.join(v.value for v in finding.vulnerabilities)}", style="yellow")
            _print(console, msg)
        for intent in (i for i in assessment.intents if not i.abstained):
            _print(console, Text(f"    intent: {intent.face_act.value} — {intent.intention}", style="blue"))
        for error in assessment.errors:
            _print(console, Text(f"    ! {error.detector} {error.kind}: {error.message}", style="bold yellow"))
    flagged = sum(len(a.findings) for a in assessments)
    _print(console, Text(f"{len(conversation)} turns, {flagged} findings", style="bold"))


def render_markdown(conversation: Conversation, assessments: Sequence[Assessment]) -> str:
    """The analysis as Markdown; every word from the transcript or a detector is escaped
    (`markdown_text`), so a turn cannot add markup, HTML, links or lines of its own."""
    from guardian.report import markdown_text as md

    lines = [f"# guardian analysis: {md(conversation.id)}", ""]
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        lines.append(f"**[{turn.index}] {md(turn.speaker)}:** {md(turn.text)}")
        lines.append("")
        if assessment.not_assessed is not None:
            lines.append(f"- not assessed: {md(assessment.not_assessed)}")
        if assessment.probability is not None:
            lines.append(f"- p(manipulation) = {assessment.probability:.2f} ({'flagged' if assessment.decision else 'not flagged'})")
        for f in assessment.findings:
            quotes = "; ".join(f"“{md(e.quote)}” (turn {e.turn}, chars {e.start}–{e.end})" for e in f.evidence)
            lines.append(f"- **{md(f.label)}** {f.score:.2f} ({md(f.detector)}): {quotes}")
        for i in (i for i in assessment.intents if not i.abstained):
            lines.append(f"- intent: `{i.face_act.value}` {md(i.intention)}")
        for e in assessment.errors:
            lines.append(f"- ⚠ {md(e.detector)} {e.kind}: {md(e.message)}")
        lines.append("")
    return "\n".join(lines)
