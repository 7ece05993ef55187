"""`guardian analyze`: assess every turn of a transcript, then render.

Each turn is assessed as the last turn of its window (the turns before it, up
to the window size), exactly as the live monitor would see it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.text import Text

from guardian.config import settings
from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.detectors.base import Detector
from guardian.errors import InputError
from guardian.findings import Assessment, DetectorError, Finding
from guardian.readers import DEFAULT_MAX_BYTES, parse_transcript, read_transcript


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
    s = settings()
    max_bytes = int(s.max_transcript_mb * 1024 * 1024) if s.max_transcript_mb else DEFAULT_MAX_BYTES
    if file == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise InputError(f"standard input is larger than {max_bytes / 1e6:.0f} MB", source="<stdin>")
        from guardian.readers import decode

        return parse_transcript(
            decode(data, source="<stdin>"),
            input_format=input_format,
            source="<stdin>",
            conversation_id="stdin",
            max_turn_chars=s.max_turn_chars,
        )
    return read_transcript(file, input_format=input_format, max_bytes=max_bytes, max_turn_chars=s.max_turn_chars)


def assess_turns(
    conversation: Conversation, detectors: Sequence[Detector], *, window: int
) -> list[Assessment]:
    """Per-turn assessments; a failing detector is recorded in the assessment, never raised."""
    out = []
    for turn in conversation.turns:
        view = conversation.upto(turn.index).window(window)
        started = time.perf_counter()
        parts = []
        for detector in detectors:
            try:
                parts.append(detector.analyze(view))
            except Exception as exc:  # a detector bug must not lose the other detectors' verdicts
                parts.append(
                    Assessment(
                        conversation_id=conversation.id,
                        turn=turn.index,
                        errors=(DetectorError(detector=detector.name, message=f"{type(exc).__name__}: {exc}"),),
                    )
                )
        latency = (time.perf_counter() - started) * 1000
        out.append(Assessment.merge(parts, conversation_id=conversation.id, turn=turn.index, latency_ms=round(latency, 3)))
    return out


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
    assessments = assess_turns(conversation, active, window=window or settings().monitor.window)
    console = Console(soft_wrap=True, highlight=False)
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


def highlighted(text: str, spans: Sequence[tuple[int, int]], *, style: str = "bold black on yellow") -> Text:
    out = Text(text)
    for start, end in spans:
        out.stylize(style, start, end)
    return out


def _spans_in_turn(findings: Sequence[Finding], turn: int) -> list[tuple[int, int]]:
    return [(e.start, e.end) for f in findings for e in f.evidence if e.turn == turn]


def render_text(console: Console, conversation: Conversation, assessments: Sequence[Assessment]) -> None:
    all_findings = [f for a in assessments for f in a.findings]
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        line = Text(f"[{turn.index}] ", style="dim")
        line.append(f"{turn.speaker}: ", style="bold cyan")
        line.append_text(highlighted(turn.text, _spans_in_turn(all_findings, turn.index)))
        console.print(line)
        if assessment.probability is not None:
            verdict = "MANIPULATIVE" if assessment.decision else "not manipulative"
            console.print(Text(f"    p(manipulation)={assessment.probability:.2f}  {verdict}", style="magenta"))
        for finding in assessment.findings:
            quote = " / ".join(f"“{e.quote}” (turn {e.turn})" for e in finding.evidence)
            msg = Text("    ⚑ ", style="red")
            msg.append(f"{finding.label} {finding.score:.2f}", style="bold red")
            msg.append(f" [{finding.detector}] ", style="dim")
            msg.append(quote)
            if finding.vulnerabilities:
                msg.append(f" → targets {', '.join(v.value for v in finding.vulnerabilities)}", style="yellow")
            console.print(msg)
        for intent in assessment.intents:
            console.print(Text(f"    intent: {intent.face_act.value} — {intent.intention}", style="blue"))
        for error in assessment.errors:
            console.print(Text(f"    ! {error.detector} {error.kind}: {error.message}", style="bold yellow"))
    flagged = sum(len(a.findings) for a in assessments)
    console.print(Text(f"{len(conversation)} turns, {flagged} findings", style="bold"))


def render_markdown(conversation: Conversation, assessments: Sequence[Assessment]) -> str:
    lines = [f"# guardian analysis: {conversation.id}", ""]
    for turn, assessment in zip(conversation.turns, assessments, strict=True):
        lines.append(f"**[{turn.index}] {turn.speaker}:** {turn.text}")
        lines.append("")
        if assessment.probability is not None:
            lines.append(f"- p(manipulation) = {assessment.probability:.2f} ({'flagged' if assessment.decision else 'not flagged'})")
        for f in assessment.findings:
            quotes = "; ".join(f"> “{e.quote}” (turn {e.turn}, chars {e.start}–{e.end})" for e in f.evidence)
            lines.append(f"- **{f.label}** {f.score:.2f} ({f.detector}): {quotes}")
        for i in assessment.intents:
            lines.append(f"- intent: `{i.face_act.value}` {i.intention}")
        for e in assessment.errors:
            lines.append(f"- ⚠ {e.detector} {e.kind}: {e.message}")
        lines.append("")
    return "\n".join(lines)
