"""Details of one finding: definition, why it fired, the evidence, similar labelled examples."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from guardian.conversation import Conversation
from guardian.findings import Finding
from guardian.report import definition, finding_title
from guardian.terminal_text import terminal_safe
from guardian.tui.findings_panel import confidence_bar
from guardian.tui.similar import SimilarExamples, SimilarLookup, similar_examples


def escape(text: str) -> str:
    """Make transcript text inert in Textual markup (its own escape leaves `[Capitalised]` tags)
    and on the terminal (control characters and bidi overrides shown, not obeyed)."""
    return terminal_safe(text).replace("[", "\\[")


def why_it_fired(finding: Finding, turn: int) -> str:
    if finding.explanation:
        return finding.explanation
    quotes = ", ".join(f"“{e.quote}” (turn {e.turn})" for e in finding.evidence) or "no quote"
    return f"{finding.detector} scored {finding.score:.2f} for {finding_title(finding)} on turn {turn}, citing {quotes}."


class FindingScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "dismiss", "Close")]

    def __init__(
        self, finding: Finding, turn: int, window: Conversation, *, lookup: SimilarLookup = similar_examples
    ) -> None:
        super().__init__()
        self.lookup_examples = lookup
        self.finding = finding
        self.turn = turn
        self.window = window

    def compose(self) -> ComposeResult:
        f = self.finding
        vulns = "\n".join(f"  • [b]{escape(v.value)}[/b]: {escape(v.definition)}" for v in f.vulnerabilities) or "  —"
        quotes = "\n".join(f"  “[reverse]{escape(e.quote)}[/reverse]” (turn {e.turn})" for e in f.evidence) or "  —"
        body = (
            f"[b]{escape(finding_title(f))}[/b]  {confidence_bar(f.score)} {f.score:.2f}  ·  {escape(f.detector)}\n\n"
            f"[b]Definition[/b]\n  {escape(definition(f))}\n\n"
            f"[b]Why it fired[/b]\n  {escape(why_it_fired(f, self.turn))}\n\n"
            f"[b]Evidence[/b]\n{quotes}\n\n"
            f"[b]Targets[/b]\n{vulns}"
        )
        with VerticalScroll(id="finding-body") as scroll:
            scroll.border_title = "Finding"
            scroll.border_subtitle = "Esc to close"
            yield Static(body, id="finding-text")
            yield Static("[b]Similar labelled examples[/b]\n  looking…", id="finding-similar")

    def on_mount(self) -> None:
        self.lookup()

    @work(thread=True, exclusive=True)
    def lookup(self) -> None:
        result = self.lookup_examples(self.finding, self.window)
        self.app.call_from_thread(self.show_similar, result)

    def show_similar(self, result: SimilarExamples) -> None:
        lines = [f"  {i}. {escape(text[:300])}" for i, text in enumerate(result.examples, start=1)]
        if result.note:
            lines.append(f"  {escape(result.note)}")
        self.query_one("#finding-similar", Static).update("[b]Similar labelled examples[/b]\n" + "\n".join(lines))
