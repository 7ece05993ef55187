"""The findings panel: one option per alerted finding, in the order they were raised.

Each entry shows the tactic, a confidence bar, the quote, the targeted
vulnerabilities and the detector; Enter or a click opens the finding's details.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from guardian.findings import Finding
from guardian.report import finding_title
from guardian.terminal_text import terminal_safe
from guardian.tui.messages import FindingChosen

BAR_WIDTH = 8


def confidence_bar(score: float, *, width: int = BAR_WIDTH) -> str:
    filled = round(max(0.0, min(1.0, score)) * width)
    return "█" * filled + "░" * (width - filled)


def describe(finding: Finding, turn: int) -> Text:
    """Four short lines, so an entry fits the 80-column layout's narrow panel."""
    text = Text()
    text.append(terminal_safe(finding_title(finding), one_line=True), style="bold")
    text.append(f"\n{confidence_bar(finding.score)} {finding.score:.2f} · turn {turn}\n")
    quote = finding.evidence[0].quote if finding.evidence else "(no quote)"
    if len(quote) > 120:
        quote = quote[:117] + "…"
    text.append(f"“{terminal_safe(quote)}”\n", style="italic")
    vulns = ", ".join(v.value for v in finding.vulnerabilities)
    detector = terminal_safe(finding.detector, one_line=True)
    text.append(f"→ {vulns} · by {detector}" if vulns else f"by {detector}", style="dim")
    return text


class FindingsPanel(OptionList):
    """An OptionList whose options carry the findings they describe."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Findings"
        self.findings: list[tuple[Finding, int]] = []

    def add_finding(self, finding: Finding, turn: int) -> None:
        following = self.highlighted is None or self.highlighted == len(self.findings) - 1
        self.findings.append((finding, turn))
        self.add_option(Option(describe(finding, turn), id=f"finding-{len(self.findings) - 1}"))
        self.border_title = f"Findings ({len(self.findings)})"
        if following:  # keep the newest in view unless the user is browsing older ones
            self.highlighted = len(self.findings) - 1

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        finding, turn = self.findings[event.option_index]
        self.post_message(FindingChosen(finding, turn))
