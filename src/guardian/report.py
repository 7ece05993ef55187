"""Shareable reports of a watched session: Markdown, self-contained HTML, or JSON.

A report is built from events only (a session log, or the TUI's own event list),
so it shows exactly what was alerted at the time: the transcript with the quoted
evidence highlighted, each finding with its definition, the intent of every turn
and the risk over time. HTML escapes every transcript character: a conversation
is untrusted input and must not be able to inject markup into the report.

The Markdown and HTML pages are Jinja templates shipped in `guardian/templates`
(`report.md.j2`, `report.html.j2`, `report.css`); this module assembles what they show.
HTML is autoescaped; in Markdown every printed value is escaped by `markdown_text`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from guardian.conversation import Evidence, Turn
from guardian.errors import InputError
from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised, TurnAdded
from guardian.findings import Assessment, Finding
from guardian.terminal_text import terminal_safe


class ReportFormat(StrEnum):
    MARKDOWN = "markdown"
    HTML = "html"
    JSON = "json"

    @classmethod
    def _missing_(cls, value: object) -> ReportFormat | None:
        """The short names people type (`-f md`, `-f htm`) as well as the full ones."""
        return {"md": cls.MARKDOWN, "htm": cls.HTML}.get(str(value).lower()) or next(
            (f for f in cls if f.value == str(value).lower()), None)


#: Plain-language descriptions of derived patterns (findings without a technique).
PATTERN_DEFINITIONS: dict[str, str] = {
    "key_phrase": "A phrase from MentalManip's list of key phrases that often carry manipulation.",
    "persistent_pressure": "A request repeated after the other person has refused.",
    "criticism_after_refusal": "Criticism of the other person right after they refused.",
}


def finding_title(finding: Finding) -> str:
    """What a person reads: the technique's name, or the pattern's name in words ("Key phrase")."""
    if finding.technique is not None:
        return finding.technique.value
    return str(finding.pattern).replace("_", " ").capitalize()


def definition(finding: Finding) -> str:
    if finding.technique is not None:
        return finding.technique.definition
    return PATTERN_DEFINITIONS.get(str(finding.pattern), "A pattern reported by the detector.")


@dataclass(slots=True)
class ConversationReport:
    """One conversation's story, assembled from events in the order they happened."""

    conversation_id: str
    turns: list[Turn] = field(default_factory=list)
    assessments: dict[int, Assessment] = field(default_factory=dict)
    risk: dict[int, float] = field(default_factory=dict)
    findings: list[tuple[int, Finding]] = field(default_factory=list)
    errors: list[ErrorRaised] = field(default_factory=list)

    def evidence_in(self, turn: int) -> list[Evidence]:
        return [e for _, f in self.findings for e in f.evidence if e.turn == turn]

    @property
    def peak_risk(self) -> float:
        return max(self.risk.values(), default=0.0)


def collect(events: Iterable[Event]) -> list[ConversationReport]:
    reports: dict[str, ConversationReport] = {}

    def get(cid: str) -> ConversationReport:
        return reports.setdefault(cid, ConversationReport(cid))

    for event in events:
        if isinstance(event, TurnAdded):
            get(event.conversation_id).turns.append(event.turn)
        elif isinstance(event, AssessmentReady):
            rep = get(event.conversation_id)
            rep.assessments[event.assessment.turn] = event.assessment
            rep.risk[event.assessment.turn] = event.risk
        elif isinstance(event, FindingRaised):
            get(event.conversation_id).findings.append((event.turn, event.finding))
        elif event.conversation_id is not None:
            get(event.conversation_id).errors.append(event)
    return list(reports.values())


def render(events: Iterable[Event], *, fmt: ReportFormat, title: str = "guardian report") -> str:
    reports = collect(events)
    if fmt is ReportFormat.JSON:
        return json.dumps({"title": title, "conversations": [_json(r) for r in reports]}, indent=2) + "\n"
    if fmt is ReportFormat.HTML:
        return _html(reports, title)
    return _markdown(reports, title)


# --- JSON ------------------------------------------------------------------------------------


def _json(rep: ConversationReport) -> dict[str, Any]:
    return {
        "conversation_id": rep.conversation_id,
        "peak_risk": rep.peak_risk,
        "turns": [
            {
                **t.model_dump(mode="json"),
                "risk": rep.risk.get(t.index),
                "intents": [
                    i.model_dump(mode="json") for i in _intents(rep.assessments.get(t.index))
                ],
            }
            for t in rep.turns
        ],
        "findings": [
            {"raised_at_turn": turn, "definition": definition(f), **f.model_dump(mode="json")}
            for turn, f in rep.findings
        ],
        "errors": [
            {"turn": e.turn, "kind": e.kind, "detector": e.detector, "message": e.message} for e in rep.errors
        ],
    }


def _intents(assessment: Assessment | None) -> tuple[Any, ...]:
    return tuple(i for i in assessment.intents if not i.abstained) if assessment is not None else ()


# --- Markdown --------------------------------------------------------------------------------

#: Characters with a meaning in inline Markdown (emphasis, code, links, images, raw HTML,
#: entities, tables, strike-through): each is shown by a backslash escape.
_MD_SPECIAL = str.maketrans(
    {**{c: "\\" + c for c in "\\`*_{}[]()<>#|~&!"}, "\n": " ", "\r": " ", "\u2028": " ", "\u2029": " "}
)


def markdown_text(text: str) -> str:
    """Transcript text as inert inline Markdown: no markup, HTML, links or line breaks of its own.

    A line break in a turn once started a fake heading or bullet in the report, and `<script>`
    or `[x](javascript:…)` passed through; line breaks become spaces, special characters are
    escaped, and terminal control characters are shown (Markdown is often read in a terminal).
    """
    return terminal_safe(text.replace("\r\n", " ").translate(_MD_SPECIAL))


def _spans(text: str, evidence: list[Evidence]) -> list[tuple[str, bool]]:
    """Split a turn's text into (piece, highlighted) runs; overlapping spans are merged."""
    marks = sorted({(e.start, e.end) for e in evidence if 0 <= e.start < e.end <= len(text)})
    merged: list[list[int]] = []
    for start, end in marks:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for start, end in merged:
        if start > pos:
            pieces.append((text[pos:start], False))
        pieces.append((text[start:end], True))
        pos = end
    if pos < len(text):
        pieces.append((text[pos:], False))
    return pieces


# --- templates -------------------------------------------------------------------------------


@cache
def _environment(kind: str) -> jinja2.Environment:
    """The Jinja environment of one output kind, loaded once from `guardian/templates`.

    HTML autoescapes (markupsafe): every value a template prints is escaped unless it is
    `Markup`, and only `risk_svg`'s chart of numbers is. Markdown has no autoescape of its
    own, so `finalize` plays that part: every value printed goes through `markdown_text`.
    """
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("guardian", "templates"),
        autoescape=kind == "html",
        finalize=(lambda value: markdown_text(str(value))) if kind == "markdown" else None,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(
        spans=_spans,
        intents=_intents,
        title_of=finding_title,
        definition=definition,
        risk_svg=risk_svg,
        risk_points=lambda rep: [rep.risk[i] for i in sorted(rep.risk)],
        speakers_of=lambda rep: list(dict.fromkeys(t.speaker for t in rep.turns)),
    )
    return env


def _markdown(reports: list[ConversationReport], title: str) -> str:
    return _environment("markdown").get_template("report.md.j2").render(reports=reports, title=title)


def _html(reports: list[ConversationReport], title: str) -> str:
    return _environment("html").get_template("report.html.j2").render(reports=reports, title=title)


def risk_svg(points: list[float], *, width: int = 480, height: int = 80) -> Markup:
    """A small inline SVG line chart of risk per turn (0 at the bottom, 1 at the top).

    Built from numbers only, so it is `Markup` (safe to print unescaped in the HTML template)."""
    if not points:
        return Markup("")
    step = width / max(1, len(points) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - max(0.0, min(1.0, p)) * (height - 4) - 2:.1f}" for i, p in enumerate(points)
    )
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="risk per turn">'
        f'<polyline fill="none" stroke="#e53935" stroke-width="2" points="{coords}"/></svg>'
    )


def write_report(text: str, output: Path, *, log: Path, force: bool = False) -> None:
    """Write a rendered report to `output` atomically, and never somewhere the user did not mean.

    Refused with one sentence (InputError): the session log it was rendered from (`report L -o L`
    once replaced the log with HTML), a symbolic link (writing through one overwrote a transcript),
    an existing file unless `force`, a directory, a place that cannot be written. The text goes to a
    temporary file beside `output` first and is moved into place, so a crash never leaves half a report
    and an existing file is never truncated.
    """
    import os
    import tempfile

    source = str(output)
    if output.is_symlink():
        raise InputError("is a symbolic link; guardian never writes a report through one, give a plain file name",
                         source=source)
    try:
        same = os.path.samefile(output, log)
    except OSError:
        same = False
    if same:
        raise InputError("is the session log being reported on; write the report to another file", source=source)
    if output.is_dir():
        raise InputError("is a directory; give a file name for the report", source=source)
    if output.exists() and not force:
        raise InputError("already exists; pass --force to replace it", source=source)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            os.replace(tmp, output)  # replaces a plain file, or a link planted since the check, never its target
        else:
            os.link(tmp, output)  # fails if a file appeared since the check: no clobbering in the race
            os.unlink(tmp)
        tmp = None
    except FileExistsError:
        raise InputError("already exists; pass --force to replace it", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot write the report there ({exc.strerror or type(exc).__name__})", source=source) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
