"""`guardian eval conversations`: labelled conversations replayed turn by turn, as in live use.

MentalManip asks "is this whole dialogue manipulative?"; a user of `guardian watch`
gets a verdict after every turn, and one false alarm anywhere in an ordinary chat
is a false alarm. So this replays each conversation the way the monitor sees it:
every turn is assessed as the latest turn of its window (the turns before it, up to
`[monitor] window`), by the default detector set, merged as the monitor merges them
(`guardian.runner.Runner.assess_batch`, the batched twin of a monitor step), and reports
per file:

- `flagged_any`: share of conversations flagged at some turn (the false-alarm rate
  of ordinary conversations; the recall of scam or manipulative ones);
- `flagged_last`: share flagged at their final turn; `turns_flagged`: share of turns;
- `top_probability_p50`/`p90`: of each conversation's highest probability;
- `suspect_named_first` (files whose `meta.roles` name a `Suspect`: scam calls, manipulative
  evaluation dialogues): of the flagged ones, the share whose first flagged turn names the
  suspect as the manipulator, out of `suspect_flagged_n`;
- the same by conversation length, per label when a file mixes labels, and
  `latency_ms_p50` per new turn (its share of a batch of windows; `--batch 1`
  assesses one window at a time, as the monitor does).

A turn is "flagged" when the merged verdict's `decision` is true: what the TUI
marks and `watch --headless` reports. `findings_any` (a finding of any detector at
some turn, e.g. a key phrase) is given beside it.

`mentalmanip_live` gives `guardian eval mentalmanip` the same view of MentalManip's
non-manipulative dialogues: every prefix assessed, through the detector interface
only, so it keeps working whatever model sits behind `local`.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.conversations import LabelledConversation
from guardian.corpora.datasets import LabelledDialogue
from guardian.detectors.base import Detector
from guardian.errors import InputError
from guardian.eval.splits import DEFAULT_SEED, split_of
from guardian.findings import Assessment

#: Conversation lengths (turns) reported separately: (name, fewest, most).
LENGTH_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("1-4", 1, 4),
    ("5-9", 5, 9),
    ("10-19", 10, 19),
    ("20+", 20, None),
)
#: MentalManip's dialogues are shorter: its non-manipulative ones are bucketed so.
MENTALMANIP_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-8", 5, 8),
    ("9+", 9, None),
)
#: Windows handed to the detectors at once (across conversations).
DEFAULT_BATCH = 64

SplitChoice = Literal["all", "train", "dev", "test"]
SPLIT_CHOICES: tuple[SplitChoice, ...] = ("all", "train", "dev", "test")


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    """What the replay keeps of one turn's merged assessment."""

    flagged: bool
    probability: float | None
    findings: int
    not_assessed: str | None
    latency_ms: float
    #: Who the flag names (`Assessment.manipulator`), when the turn is flagged.
    named: str | None = None

    @classmethod
    def of(cls, assessment: Assessment) -> TurnVerdict:
        return cls(
            flagged=assessment.decision,
            probability=assessment.probability,
            findings=len(assessment.findings),
            not_assessed=assessment.not_assessed,
            latency_ms=assessment.latency_ms,
            named=assessment.manipulator if assessment.decision else None,
        )


@dataclass(frozen=True, slots=True)
class Replayed:
    """One conversation's verdicts, turn by turn."""

    id: str
    label: str
    verdicts: tuple[TurnVerdict, ...]
    #: The speaker the file names `Suspect` (`meta.roles`), if any.
    suspect: str | None = None
    #: What kind of talk (`meta.register`), where the file says.
    register: str | None = None
    #: The turns labelled manipulative one by one (`meta.manipulative_turns`); None when only the
    #: conversation is labelled.
    manipulative_turns: tuple[int, ...] | None = None

    @property
    def flagged_any(self) -> bool:
        return any(v.flagged for v in self.verdicts)

    @property
    def first_named(self) -> str | None:
        """Who the first flagged turn names: what a user watching live is told first."""
        return next((v.named for v in self.verdicts if v.flagged), None)

    @property
    def flagged_last(self) -> bool:
        return bool(self.verdicts) and self.verdicts[-1].flagged

    @property
    def top_probability(self) -> float | None:
        probs = [v.probability for v in self.verdicts if v.probability is not None]
        return max(probs) if probs else None


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How conversations are replayed (the CLI's options after parsing)."""

    window: int
    batch: int = DEFAULT_BATCH
    show_progress: bool = False


@dataclass(frozen=True, slots=True)
class Selection:
    """Which conversations of a file are evaluated."""

    split: SplitChoice = "all"
    split_seed: int = DEFAULT_SEED
    ids: frozenset[str] | None = None
    limit: int | None = None
    sample_seed: int | None = None


# --- input ---------------------------------------------------------------------------------------


def read_ids(path: str | Path) -> frozenset[str]:
    """Conversation ids, one a line (blank lines and `#` comments skipped)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=str(path)) from None
    except (UnicodeDecodeError, IsADirectoryError):
        raise InputError("not a UTF-8 text file of conversation ids", source=str(path)) from None
    return frozenset(s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#"))


def select(conversations: Sequence[LabelledConversation], selection: Selection) -> list[LabelledConversation]:
    """The split part, then the listed ids, then the first `limit` (or a seeded sample of `limit`)."""
    chosen = [
        c
        for c in conversations
        if (selection.split == "all" or split_of(c.id, seed=selection.split_seed) == selection.split)
        and (selection.ids is None or c.id in selection.ids)
    ]
    limit = selection.limit
    if limit is None or limit >= len(chosen):
        return chosen
    if selection.sample_seed is None:
        return chosen[:limit]
    rng = np.random.default_rng(selection.sample_seed)
    picks = sorted(rng.choice(len(chosen), size=limit, replace=False).tolist())
    return [chosen[i] for i in picks]


# --- replay --------------------------------------------------------------------------------------


def _windows(conversation: Conversation, window: int) -> Iterator[Conversation]:
    """Each turn's window as the monitor forms it: the turns up to it, the last `window` of them."""
    for turn in conversation.turns:
        yield conversation.window(window, ending_at=turn.index)


def replay(
    conversations: Sequence[Conversation],
    detectors: Sequence[Detector],
    *,
    options: ReplayOptions,
    extra: Callable[[Conversation], Sequence[Conversation]] | None = None,
) -> list[list[Assessment]]:
    """Every turn of every conversation assessed as live, the detectors batched across conversations.

    Returns, per conversation, the merged assessment of each turn (in turn order),
    followed by the assessments of `extra(conversation)` windows when given (used to
    add the whole dialogue where it is longer than the window). Each conversation's
    windows reach the detectors in turn order, as they would live.
    """
    from tqdm import tqdm

    from guardian.runner import Runner

    runner = Runner(detectors)

    owners: list[int] = []
    views: list[Conversation] = []
    for n, conversation in enumerate(conversations):
        for view in (*_windows(conversation, options.window), *(extra(conversation) if extra else ())):
            owners.append(n)
            views.append(view)
    out: list[list[Assessment]] = [[] for _ in conversations]
    batch = max(1, options.batch)
    with tqdm(
        total=len(views),
        desc="replaying turns",
        unit="turn",
        file=sys.stderr,
        disable=not options.show_progress,
        leave=False,
        mininterval=1.0,
    ) as bar:
        for first in range(0, len(views), batch):
            chunk = views[first : first + batch]
            for owner, assessment in zip(owners[first : first + batch], runner.assess_batch(chunk), strict=True):
                out[owner].append(assessment)
            bar.update(len(chunk))
    return out


def replay_labelled(
    conversations: Sequence[LabelledConversation], detectors: Sequence[Detector], *, options: ReplayOptions
) -> list[Replayed]:
    assessed = replay([c.conversation for c in conversations], detectors, options=options)
    return [
        Replayed(c.id, c.label, tuple(TurnVerdict.of(a) for a in turns), c.suspect, c.register, c.manipulative_turns)
        for c, turns in zip(conversations, assessed, strict=True)
    ]


# --- figures -------------------------------------------------------------------------------------


def _share(count: int, total: int) -> float | None:
    return round(count / total, 4) if total else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 4) if values else None


def bucket_of(turns: int, buckets: Sequence[tuple[str, int, int | None]] = LENGTH_BUCKETS) -> str:
    for name, low, high in buckets:
        if turns >= low and (high is None or turns <= high):
            return name
    return buckets[0][0] if turns < buckets[0][1] else buckets[-1][0]


def figures(replayed: Sequence[Replayed], *, latency: bool = True) -> dict[str, Any]:
    """The shares and percentiles of one group of replayed conversations."""
    verdicts = [v for r in replayed for v in r.verdicts]
    tops = [p for r in replayed if (p := r.top_probability) is not None]
    out: dict[str, Any] = {
        "n": len(replayed),
        "turns": len(verdicts),
        "flagged_any": _share(sum(r.flagged_any for r in replayed), len(replayed)),
        "flagged_last": _share(sum(r.flagged_last for r in replayed), len(replayed)),
        "turns_flagged": _share(sum(v.flagged for v in verdicts), len(verdicts)),
        "findings_any": _share(sum(any(v.findings for v in r.verdicts) for r in replayed), len(replayed)),
        "not_assessed": _share(sum(any(v.not_assessed for v in r.verdicts) for r in replayed), len(replayed)),
        "top_probability_p50": _percentile(tops, 50),
        "top_probability_p90": _percentile(tops, 90),
    }
    accused = [r for r in replayed if r.suspect is not None and r.flagged_any]
    if any(r.suspect is not None for r in replayed):
        # of the flagged conversations whose file names a suspect, the share whose first flag names them
        out["suspect_named_first"] = _share(sum(r.first_named == r.suspect for r in accused), len(accused))
        out["suspect_flagged_n"] = len(accused)
    judged = [r for r in replayed if r.manipulative_turns is not None]
    if judged:
        # against the turn labels: did the flag land on the turn that manipulates, and only there?
        marked = [(r, i) for r in judged for i in r.manipulative_turns or ()]
        flagged = [(r, i) for r in judged for i, v in enumerate(r.verdicts) if v.flagged]
        hits = sum(i in (r.manipulative_turns or ()) for r, i in flagged)
        out["turn_recall"] = _share(sum(r.verdicts[i].flagged for r, i in marked if i < len(r.verdicts)), len(marked))
        out["turn_precision"] = _share(hits, len(flagged))
        out["labelled_turns"] = len(marked)
    if latency:
        timed = [v.latency_ms for v in verdicts if v.not_assessed is None]
        out["latency_ms_p50"] = round(statistics.median(timed), 3) if timed else None
        out["latency_ms_p90"] = _percentile(timed, 90)
    return out


def by_length(replayed: Sequence[Replayed]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Replayed]] = {name: [] for name, _, _ in LENGTH_BUCKETS}
    for r in replayed:
        groups[bucket_of(len(r.verdicts))].append(r)
    return {name: figures(group, latency=False) for name, group in groups.items()}


@dataclass(frozen=True, slots=True)
class FileReport:
    """The JSON object `guardian eval conversations` prints for one file."""

    file: str
    split: str
    window: int
    batch: int
    detectors: tuple[str, ...]
    replayed: tuple[Replayed, ...] = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        labels = Counter(r.label for r in self.replayed)
        out: dict[str, Any] = {
            "file": self.file,
            "split": self.split,
            "window": self.window,
            "batch": self.batch,
            "detectors": list(self.detectors),
            "label": dict(sorted(labels.items())),
            **figures(self.replayed),
            "by_length": by_length(self.replayed),
        }
        if len(labels) > 1:
            out["by_label"] = {
                label: {**figures(group), "by_length": by_length(group)}
                for label in sorted(labels)
                if (group := [r for r in self.replayed if r.label == label])
            }
        registers = sorted({r.register for r in self.replayed if r.register is not None})
        if registers:
            out["by_register"] = {
                register: {label: figures(group, latency=False) for label in sorted(labels)
                           if (group := [r for r in self.replayed if r.register == register and r.label == label])}
                for register in registers
            }
        return out


def evaluate_files(
    files: Sequence[tuple[str, Sequence[LabelledConversation]]],
    *,
    detectors: Sequence[Detector],
    options: ReplayOptions,
    selection: Selection,
) -> Iterator[FileReport]:
    """One report per (file name, its conversations), in order, each replayed when its turn comes.

    Models are loaded first, so the first batch's latency is a turn's, not a model load's.
    """
    from guardian.language import warm_up

    warm_up()
    for detector in detectors:
        detector.warm_up()
    for file, conversations in files:
        chosen = select(conversations, selection)
        yield FileReport(
            file=file,
            split=selection.split,
            window=options.window,
            batch=options.batch,
            detectors=tuple(d.name for d in detectors),
            replayed=tuple(replay_labelled(chosen, detectors, options=options)),
        )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


TABLE_COLUMNS = (
    ("n", "n"),
    ("turns", "turns"),
    ("flagged_any", "any"),
    ("flagged_last", "last"),
    ("turns_flagged", "turns_fl"),
    ("findings_any", "findings"),
    ("not_assessed", "not_ass"),
    ("top_probability_p50", "top_p50"),
    ("top_probability_p90", "top_p90"),
    ("suspect_named_first", "named"),
    ("turn_recall", "turn_rec"),
    ("turn_precision", "turn_pre"),
    ("latency_ms_p50", "ms_p50"),
)


def render_text(reports: Sequence[dict[str, Any]]) -> str:
    """A small table: one row per file, then its labels and length buckets, indented."""
    header = f"{'':28}" + "".join(f"{title:>9}" for _, title in TABLE_COLUMNS)
    lines = [header]

    def row(name: str, data: dict[str, Any]) -> None:
        lines.append(f"{name[:28]:28}" + "".join(f"{_fmt(data.get(key)):>9}" for key, _ in TABLE_COLUMNS))

    for report in reports:
        row(Path(report["file"]).name, report)
        for bucket, data in report["by_length"].items():
            if data["n"]:
                row(f"  {bucket} turns", data)
        for label, data in report.get("by_label", {}).items():
            row(f"  label {label}", data)
            for bucket, sub in data["by_length"].items():
                if sub["n"]:
                    row(f"    {bucket} turns", sub)
        for register, by_label in report.get("by_register", {}).items():
            for label, data in by_label.items():
                row(f"  {register}: {label}", data)
    if reports:
        first = reports[0]
        lines.append("")
        lines.append(
            f"split {first['split']}, window {first['window']}, detectors {', '.join(first['detectors'])}; "
            "any/last: share of conversations flagged at some / the final turn; named: of the flagged ones "
            "whose file names a suspect, the share whose first flag names them"
        )
    return "\n".join(lines)


# --- MentalManip, live ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveMentalManip:
    """How MentalManip's non-manipulative dialogues fare in a live replay.

    `ever_flagged_fpr`: share flagged at any prefix (each turn's window, as the monitor
    forms it). `fpr_by_turns`: the final-turn decision on the whole dialogue (what
    `false_positive_rate` pools) by dialogue length, with the count per bucket.
    """

    ever_flagged_fpr: float | None
    fpr_by_turns: dict[str, dict[str, float | int | None]]

    def as_dict(self) -> dict[str, Any]:
        return {"ever_flagged_fpr": self.ever_flagged_fpr, "fpr_by_turns": self.fpr_by_turns}


def mentalmanip_live(
    dialogues: Sequence[LabelledDialogue], detector: Detector, *, options: ReplayOptions
) -> LiveMentalManip:
    """`ever_flagged_fpr` and `fpr_by_turns` of `detector`, through `Detector.analyze_batch` only."""
    negatives = [d.conversation for d in dialogues if not d.manipulative]

    def whole(conversation: Conversation) -> Sequence[Conversation]:
        # The final decision on the whole dialogue, where the live window is shorter than it.
        return (conversation,) if len(conversation.turns) > options.window else ()

    assessed = replay(negatives, [detector], options=options, extra=whole)
    ever = [any(a.decision for a in turns[: len(c.turns)]) for c, turns in zip(negatives, assessed, strict=True)]
    final = [bool(turns) and turns[-1].decision for turns in assessed]
    counts: dict[str, list[int]] = {name: [0, 0] for name, _, _ in MENTALMANIP_BUCKETS}
    for conversation, flagged in zip(negatives, final, strict=True):
        bucket = counts[bucket_of(len(conversation.turns), MENTALMANIP_BUCKETS)]
        bucket[0] += 1
        bucket[1] += flagged
    return LiveMentalManip(
        ever_flagged_fpr=_share(sum(ever), len(ever)),
        fpr_by_turns={name: {"n": n, "fpr": _share(fp, n)} for name, (n, fp) in counts.items()},
    )
