"""The one detector runner: timeouts, failures as DetectorError, grounding, batch == single, async == sync.

The verdicts compared come from the real key-phrase detector on MentalManip dialogues;
the failure cases use the monitor's small detectors that hang, raise or lie on purpose
(no real model does that on demand).
"""

from __future__ import annotations

import ast
import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from guardian.conversation import Conversation, Evidence
from guardian.corpora.datasets import load_mentalmanip
from guardian.detectors.base import Detector
from guardian.detectors.keyphrases import KeyPhraseDetector
from guardian.findings import Assessment, DetectorError, Finding
from guardian.runner import Run, Runner, grounded
from guardian.taxonomy import Technique
from tests.monitor_fakes import FailingDetector, LyingDetector, SlowDetector, WordDetector


def _timeless(assessment: Assessment) -> Assessment:
    """The assessment without its latency (the one field two runs never share)."""
    return assessment.model_copy(update={"latency_ms": 0.0})


@pytest.fixture(scope="module")
def windows() -> list[Conversation]:
    """Every turn's window (size 4) of the first 60 MentalManip dialogues, some with key phrases."""
    out: list[Conversation] = []
    for dialogue in load_mentalmanip()[:60]:
        conversation = dialogue.conversation
        out.extend(conversation.window(4, ending_at=turn.index) for turn in conversation.turns)
    return out


@pytest.fixture(scope="module")
def keyphrases() -> KeyPhraseDetector:
    return KeyPhraseDetector()


class _BatchBroken(Detector):
    """Wraps a real detector; its batch path always fails (the runner must fall back window by window)."""

    name: ClassVar[str] = "batch-broken"

    def __init__(self, inner: Detector) -> None:
        self.inner = inner
        self.batches = 0

    def analyze(self, window: Conversation) -> Assessment:
        return self.inner.analyze(window).model_copy(update={"detectors": (self.name,)})

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        self.batches += 1
        raise ValueError("batch path broken")


class _Batched(Detector):
    """Wraps a real detector with a batch path of its own, and records which path was used."""

    name: ClassVar[str] = "batched"

    def __init__(self, inner: Detector) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def analyze(self, window: Conversation) -> Assessment:
        self.calls.append("analyze")
        return self.inner.analyze(window).model_copy(update={"detectors": (self.name,)})

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        self.calls.append(f"batch:{len(windows)}")
        return [self.inner.analyze(w).model_copy(update={"detectors": (self.name,)}) for w in windows]


def test_batch_and_single_paths_give_the_same_assessments(windows: list[Conversation], keyphrases: KeyPhraseDetector) -> None:
    batched = _Batched(keyphrases)
    runner = Runner([keyphrases, batched, _BatchBroken(keyphrases)])
    many = runner.run_batch(windows)
    batched.calls.clear()
    one_by_one = [runner.run(w) for w in windows]
    assert batched.calls == ["analyze"] * len(windows)
    assert [_timeless(r.assessment) for r in many] == [_timeless(r.assessment) for r in one_by_one]
    flagged = [r.assessment for r in many if r.assessment.findings]
    assert flagged, "some windows hold key phrases"
    assert all(a.errors == () for a in (r.assessment for r in many))
    assert many[0].assessment.detectors == ("keyphrases", "batched", "batch-broken")


def test_the_batch_path_gives_each_detector_all_windows_at_once(windows: list[Conversation], keyphrases: KeyPhraseDetector) -> None:
    batched = _Batched(keyphrases)
    Runner([batched]).run_batch(windows[:10])
    assert batched.calls == ["batch:10"]


async def test_async_and_sync_give_the_same_assessments(windows: list[Conversation], keyphrases: KeyPhraseDetector) -> None:
    runner = Runner([keyphrases, FailingDetector(), LyingDetector()], timeout_s=5.0)
    try:
        sample = windows[:40]
        sync = [runner.run(w) for w in sample]
        asynchronous = [await runner.arun(w) for w in sample]
    finally:
        runner.close()
    assert [_timeless(r.assessment) for r in sync] == [_timeless(r.assessment) for r in asynchronous]
    assert [r.failures for r in sync] == [r.failures for r in asynchronous]
    assert any(r.assessment.findings for r in sync)


@pytest.mark.parametrize("path", ["sync", "async", "batch"])
def test_a_raising_detector_becomes_a_detector_error(path: str, windows: list[Conversation], keyphrases: KeyPhraseDetector) -> None:
    window = next(w for w in windows if keyphrases.analyze(w).findings)
    runner = Runner([FailingDetector(), keyphrases], timeout_s=5.0)
    try:
        if path == "sync":
            run = runner.run(window)
        elif path == "async":
            run = asyncio.run(runner.arun(window))
        else:
            (run,) = runner.run_batch([window])
    finally:
        runner.close()
    error = DetectorError(detector="failing-test", kind="error", message="RuntimeError: model file is corrupt")
    assert run.failures == (error,)
    assert run.assessment.errors == (error,)
    assert run.assessment.findings == keyphrases.analyze(window).findings  # the other detector's verdict stands
    assert run.assessment.detectors == ("failing-test", "keyphrases")


def test_a_slow_detector_times_out_and_the_others_stand() -> None:
    window = Conversation.from_pairs([("Ann", "You are stupid.")], id="c")
    runner = Runner([SlowDetector(1.0), WordDetector()], timeout_s=0.1)
    try:
        started = time.perf_counter()
        run = runner.run(window)
        elapsed = time.perf_counter() - started
        arun = asyncio.run(runner.arun(window))
    finally:
        runner.close()
    for result in (run, arun):
        assert [(e.detector, e.kind, e.message) for e in result.failures] == [("slow-test", "timeout", "no answer within 0.1 s")]
        assert [f.detector for f in result.assessment.findings] == ["word-test"]
    assert elapsed < 0.8  # the deadline cut the 1 s detector short


def test_a_batch_gets_the_time_limit_once_per_window() -> None:
    conversation = Conversation.from_pairs([("Ann", "You are stupid."), ("Ben", "Stop it.")], id="c")
    views = [conversation.window(2, ending_at=i) for i in range(2)]
    runner = Runner([SlowDetector(1.0), WordDetector()], timeout_s=0.1)
    try:
        started = time.perf_counter()
        runs = runner.run_batch(views)
        elapsed = time.perf_counter() - started
    finally:
        runner.close()
    assert elapsed < 0.9
    assert [[(e.detector, e.kind) for e in r.failures] for r in runs] == [[("slow-test", "timeout")]] * 2
    assert runs[0].assessment.decision and not runs[1].assessment.decision


class _Quoting(Detector):
    """Returns the evidence it was given, as a finding on the window's latest turn."""

    name: ClassVar[str] = "quoting"

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence

    def analyze(self, window: Conversation) -> Assessment:
        finding = Finding(technique=Technique.DENIAL, score=0.9, evidence=(self.evidence,), detector=self.name)
        return Assessment(conversation_id=window.id, turn=window.turns[-1].index, findings=(finding,), detectors=(self.name,))


@pytest.mark.parametrize(
    ("evidence", "kept"),
    [
        (Evidence(turn=1, quote="stupid", start=8, end=14), True),
        (Evidence(turn=1, quote="stupid", start=9, end=15), False),  # the words, at the wrong place
        (Evidence(turn=1, quote="Stupid", start=8, end=14), False),  # not verbatim
        (Evidence(turn=0, quote="Hi", start=0, end=2), False),  # a turn outside the window
        (Evidence(turn=7, quote="Hi", start=0, end=2), False),  # a turn that was never said
    ],
)
def test_every_quote_is_grounded_by_turn_and_span(evidence: Evidence, kept: bool) -> None:
    conversation = Conversation.from_pairs([("Ann", "Hi"), ("Ben", "You are stupid, Ann.")], id="c")
    window = conversation.window(1)
    run = Runner([_Quoting(evidence)]).run(window)
    assert grounded(_Quoting(evidence).analyze(window).findings[0], window) is kept
    assert len(run.assessment.findings) == (1 if kept else 0)
    if not kept:
        assert [(e.detector, e.kind) for e in run.failures] == [("quoting", "error")]
        assert "not in the transcript" in run.assessment.errors[0].message


def test_an_ungrounded_quote_is_dropped_on_every_path() -> None:
    window = Conversation.from_pairs([("Ann", "Hello there")], id="c")
    runner = Runner([LyingDetector()])
    runs: list[Run] = [runner.run(window), asyncio.run(runner.arun(window)), *runner.run_batch([window])]
    for run in runs:
        assert run.assessment.findings == ()
        assert [e.message for e in run.failures] == ["dropped a Denial finding whose quote is not in the transcript"]


def test_a_window_the_models_cannot_read_reaches_no_detector() -> None:
    french = Conversation.from_pairs(
        [("Ann", "Je ne sais pas pourquoi tu fais toujours des histoires pour rien, c'est fatigant.")], id="fr"
    )
    runner = Runner([FailingDetector()])
    for assessment in (runner.assess(french), asyncio.run(runner.aassess(french)), *runner.assess_batch([french])):
        assert assessment.not_assessed is not None and assessment.not_assessed.startswith("language")
        assert assessment.errors == () and assessment.detectors == ()


def test_detectors_that_could_not_be_created_are_recorded_in_every_assessment() -> None:
    missing = DetectorError(detector="local", kind="unavailable", message="no model artifact")
    window = Conversation.from_pairs([("Ann", "You are stupid.")], id="c")
    run = Runner([WordDetector()], unavailable=[missing]).run(window)
    assert run.failures == (missing,)
    assert run.assessment.detectors == ("word-test", "local") and run.assessment.decision


class _NotReentrant(Detector):
    """Fails if two threads are inside it at once (as a tokenizer that is not re-entrant would)."""

    name: ClassVar[str] = "not-reentrant"

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self._count = threading.Lock()

    def analyze(self, window: Conversation) -> Assessment:
        with self._count:
            self.inside += 1
            self.overlaps += self.inside > 1
        time.sleep(0.02)
        with self._count:
            self.inside -= 1
        return self.empty(window)


@pytest.mark.parametrize("serialize", [True, False])
def test_serialize_lets_one_thread_at_a_time_into_a_detector(serialize: bool) -> None:
    detector = _NotReentrant()
    runner = Runner([detector], timeout_s=5.0, serialize=serialize)
    window = Conversation.from_pairs([("Ann", "Hello there, how are you doing today?")], id="c")
    threads = [threading.Thread(target=runner.run, args=(window,)) for _ in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        runner.close()
    assert (detector.overlaps == 0) is serialize


#: Modules that may call a detector's analyze methods themselves: the runner; detectors
#: built from other detectors (the cascade, the LLM detector's intent agent, the default
#: `analyze_batch`); evaluation and benchmarks, which measure one detector on its own.
_MAY_CALL_DETECTORS = ("runner.py", "detectors/", "eval/")  # detectors/llm/cascade.py consults local and the LLM
_ANALYZE = {"analyze", "aanalyze", "analyze_batch"}


def test_only_the_runner_runs_detectors_over_windows() -> None:
    """The contract import-linter cannot express (it sees imports, not calls): every surface
    (analyze, monitor, chatbot integration, watch, TUI, audio, service) goes through the runner."""
    root = Path(__file__).resolve().parents[1] / "src" / "guardian"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(_MAY_CALL_DETECTORS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ANALYZE:
                offenders.append(f"{relative}:{node.lineno}")
    assert offenders == []


class _Recording(WordDetector):
    """A WordDetector that keeps the windows it was given (to see what detectors read)."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.seen: list[Conversation] = []

    def analyze(self, window: Conversation) -> Assessment:
        self.seen.append(window)
        return super().analyze(window)


def test_detectors_read_normalised_text_and_quotes_map_back_to_the_original() -> None:
    """Issue 47.3: a Cyrillic "о", a zero-width space and leetspeak no longer hide the word from a
    detector, and the quote it returns is the user's own disguised text at its own span, on
    every path (run, arun, run_batch)."""
    disguised = "Y\u043eu are s\u200btup1d, really"
    window = Conversation.from_pairs([("A", "hello there"), ("B", disguised)], id="c")
    detector = _Recording("you are stupid")
    runner = Runner([detector])
    runs = [runner.run(window), asyncio.run(runner.arun(window)), runner.run_batch([window])[0]]
    for run in runs:
        assert run.failures == ()
        [finding] = run.assessment.findings
        [evidence] = finding.evidence
        end = disguised.index(",")  # the span runs over the zero-width space to the disguised "1d"
        assert (evidence.turn, evidence.start, evidence.end) == (1, 0, end)
        assert evidence.quote == disguised[:end] == window.turn(1).text[evidence.start : evidence.end]
    for seen in detector.seen:
        assert seen.turn(1).text == "You are stupid, really"
        assert seen.turn(0) is window.turn(0)  # a plain turn is the same object


def test_a_window_with_nothing_to_normalise_reaches_detectors_as_itself() -> None:
    window = Conversation.from_pairs([("A", "You are stupid."), ("B", "It was $500 in 2024.")], id="c")
    detector = _Recording("stupid")
    runner = Runner([detector])
    runner.run(window)
    asyncio.run(runner.arun(window))
    runner.run_batch([window])
    assert detector.seen and all(seen is window for seen in detector.seen)
