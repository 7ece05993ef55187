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
from markupsafe import Markup, escape

from guardian.conversation import Evidence, Turn
from guardian.errors import InputError
from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised, TurnAdded
from guardian.findings import Assessment, Finding, FindingCard
from guardian.plain_words import StepKind, number, plain_words
from guardian.summary import ConversationSummary, summarize
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


def label_title(label: str) -> str:
    """A finding label in words: a technique's name as it is, a pattern's capitalised ("Key phrase")."""
    return label.replace("_", " ").capitalize() if label.islower() else label


def definition(finding: Finding) -> str:
    if finding.technique is not None:
        return finding.technique.definition
    known = PATTERN_DEFINITIONS.get(str(finding.pattern))
    if known is not None:
        return known
    words = plain_words().label(str(finding.pattern))
    return f"The speaker {words}." if words else "A pattern reported by the detector."


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

    @property
    def cards(self) -> list[FindingCard]:
        """One per flagged turn, in turn order (each turn's own assessment's card)."""
        return [a.card for _, a in sorted(self.assessments.items()) if a.card is not None]

    def card_of(self, turn: int) -> FindingCard | None:
        assessment = self.assessments.get(turn)
        return assessment.card if assessment is not None else None

    @property
    def summary(self) -> ConversationSummary:
        """Per speaker: flagged turns, tactics, since when; the risk after the latest turn."""
        latest = self.risk[max(self.risk)] if self.risk else 0.0
        return summarize(self.conversation_id, self.turns, self.cards, risk=latest, peak_risk=self.peak_risk)

    @property
    def kinds(self) -> list[StepKind]:
        kinds = {c.kind for c in self.cards}
        return [k for k in ("scam", "manipulation") if k in kinds]

    @property
    def thresholds(self) -> list[tuple[str, float]]:
        """The thresholds the turns were judged against, for the chart: (label, value), each once."""
        seen: dict[float, str] = {}
        for _, a in sorted(self.assessments.items()):
            v = a.verdict
            if v is None:
                continue
            seen.setdefault(round(v.threshold, 4), f"{v.sensitivity or 'configured'} threshold")
            if v.repeat_threshold is not None:
                seen.setdefault(round(v.repeat_threshold, 4), "repeat threshold")
        return [(label, value) for value, label in sorted(seen.items(), reverse=True)]


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
        return json.dumps({"schema_version": REPORT_SCHEMA_VERSION, "title": title,
                           "conversations": [_json(r) for r in reports]}, indent=2) + "\n"
    if fmt is ReportFormat.HTML:
        return _html(reports, title)
    return _markdown(reports, title)


# --- JSON ------------------------------------------------------------------------------------


#: Version of the `report -f json` document: 2 added the summary and the cards (issue 46).
REPORT_SCHEMA_VERSION = 2


def _json(rep: ConversationReport) -> dict[str, Any]:
    return {
        "conversation_id": rep.conversation_id,
        "peak_risk": rep.peak_risk,
        "summary": rep.summary.model_dump(mode="json"),
        "cards": [c.model_dump(mode="json") for c in rep.cards],
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
        title_of_label=label_title,
        definition=definition,
        risk_svg=risk_svg,
        risk_chart=risk_chart,
        risk_points=lambda rep: [rep.risk[i] for i in sorted(rep.risk)],
        words=plain_words(),
        number=number,
        bar_width=lambda score: f"{max(0.0, min(1.0, score)) * 6:.2f}",
        speakers_of=lambda rep: list(dict.fromkeys(t.speaker for t in rep.turns)),
    )
    return env


def _markdown(reports: list[ConversationReport], title: str) -> str:
    return _environment("markdown").get_template("report.md.j2").render(reports=reports, title=title)


def _html(reports: list[ConversationReport], title: str) -> str:
    return _environment("html").get_template("report.html.j2").render(reports=reports, title=title)


def risk_svg(points: list[float], *, width: int = 480, height: int = 80) -> Markup:
    """A small inline SVG line of risk per turn (0 at the bottom, 1 at the top), no axes."""
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


def risk_chart(
    risk: dict[int, float], *, thresholds: Iterable[tuple[str, float]] = (), flagged: Iterable[int] = (),
    width: int = 640, height: int = 220,
) -> Markup:
    """The risk after each turn as an SVG chart a person can read: labelled axes (turn, risk 0-1),
    the thresholds the turns were judged against drawn as dashed lines with their names, and the
    flagged turns as dots. Numbers and guardian's own words only; a threshold's name (a
    detector's sensitivity) is escaped, so the result is safe `Markup`."""
    if not risk:
        return Markup("")
    left, right, top, bottom = 48, 150, 12, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    turns = sorted(risk)
    first, last = turns[0], turns[-1]
    span = max(1, last - first)

    def x(turn: int) -> float:
        return left + (turn - first) / span * plot_w

    def y(value: float) -> float:
        return top + (1.0 - max(0.0, min(1.0, value))) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="risk after each turn, with the thresholds" class="chart" font-size="11" '
        'font-family="system-ui,sans-serif">',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#444"/>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left - 4}" y1="{y(tick):.1f}" x2="{left}" y2="{y(tick):.1f}" stroke="#444"/>'
                     f'<text x="{left - 7}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>')
    every = max(1, len(turns) // 12)
    for turn in turns[::every]:
        parts.append(f'<line x1="{x(turn):.1f}" y1="{top + plot_h}" x2="{x(turn):.1f}" y2="{top + plot_h + 4}" '
                     f'stroke="#444"/><text x="{x(turn):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{turn}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">turn</text>')
    parts.append(f'<text x="12" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">risk</text>')
    for label, value in thresholds:
        parts.append(f'<line x1="{left}" y1="{y(value):.1f}" x2="{left + plot_w}" y2="{y(value):.1f}" '
                     f'stroke="#777" stroke-dasharray="5 4"/><text x="{left + plot_w + 6}" y="{y(value) + 4:.1f}">'
                     f'{escape(label)} {number(value)}</text>')
    coords = " ".join(f"{x(t):.1f},{y(risk[t]):.1f}" for t in turns)
    parts.append(f'<polyline fill="none" stroke="#e53935" stroke-width="2" points="{coords}"/>')
    for turn in flagged:
        if turn in risk:
            parts.append(f'<circle cx="{x(turn):.1f}" cy="{y(risk[turn]):.1f}" r="4" fill="#b71c1c">'
                         f'<title>turn {turn} flagged</title></circle>')
    parts.append("</svg>")
    return Markup("".join(parts))


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
