"""`guardian bench`: speed figures anyone can re-run, as one JSON object.

Each suite runs in its own process (so its peak RSS is its own), warms up once,
then repeats its measurement `runs` times (>= 5) and reports the median of the
per-run figures. Latencies are in milliseconds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from guardian.conversation import Conversation
from guardian.eval.timing import (
    Figures,
    latency_runs,
    machine,
    peak_rss_mb,
    percentile,
    throughput_runs,
)

__all__ = [
    "SCALE_TURNS",
    "SUITES",
    "latency_runs",
    "machine",
    "peak_rss_mb",
    "percentile",
    "run_bench",
    "run_command",
    "run_suite",
    "scale_figures",
    "throughput_runs",
]
SUITES: dict[str, Callable[[int], Figures]] = {}


def suite(name: str) -> Callable[[Callable[[int], Figures]], Callable[[int], Figures]]:
    def register(fn: Callable[[int], Figures]) -> Callable[[int], Figures]:
        SUITES[name] = fn
        return fn

    return register


def _dialogues(limit: int, *, offset: int = 0) -> list[Conversation]:
    from guardian.corpora.datasets import load_mentalmanip

    return [d.conversation for d in load_mentalmanip()[offset : offset + limit]]


class _Fresh:
    """Hands out dialogues no earlier run has seen.

    Detectors cache per-utterance work (a live turn costs one new utterance), so
    re-running the same text would time the cache, not the model.
    """

    def __init__(self) -> None:
        self.offset = 0

    def dialogues(self, n: int) -> list[Conversation]:
        out = _dialogues(n, offset=self.offset)
        self.offset += n
        return out

    def conversation(self, turns: int) -> Conversation:
        """A long conversation stitched from unseen dialogues, speakers alternating as in the data."""
        pairs: list[tuple[str, str]] = []
        while len(pairs) < turns:
            (conv,) = self.dialogues(1)
            pairs.extend((t.speaker, t.text) for t in conv.turns)
        return Conversation.from_pairs(pairs[:turns], id=f"bench-{self.offset}")


def _detector_suite(name: str, runs: int, *, window: int = 10) -> Figures:
    from guardian.detectors import registry

    if name not in registry.names():
        return {"skipped": f"detector {name!r} is not installed"}
    detector = registry.create(name)
    detector.warm_up()
    fresh = _Fresh()

    def per_turn() -> list[float]:
        """Each new turn of an unseen 40-turn conversation, assessed with its 10-turn window."""
        conv = fresh.conversation(40)
        out = []
        for i in range(len(conv)):
            w = conv.window(window, ending_at=i)
            began = time.perf_counter()
            detector.analyze(w)
            out.append((time.perf_counter() - began) * 1000)
        return out

    figures: Figures = {"detector": name, "window_turns": window, "per_turn": latency_runs(per_turn, runs=runs)}

    def whole_dialogues() -> int:
        """50 unseen dialogues as one batch (`analyze_batch`: what `guardian eval` and a file scan do)."""
        batch = fresh.dialogues(50)
        detector.analyze_batch(batch)
        return len(batch)

    figures["batch_dialogues_per_s"] = throughput_runs(whole_dialogues, runs=runs)
    return figures


@suite("detect")
def bench_detect(runs: int) -> Figures:
    """The local manipulation model: one new turn with a 10-turn window, and whole dialogues."""
    from guardian.detectors import registry

    name = registry.default_names(purpose="chatbot")[0]  # the local model, else the key phrases
    figures = _detector_suite(name, runs)
    if name == "local":
        import importlib

        size = getattr(importlib.import_module("guardian.detectors.local.detector"), "artifact_size_mb", None)
        if callable(size):
            figures["artifact_mb"] = size()
        figures["keyphrases"] = _detector_suite("keyphrases", runs)
    return figures


@suite("intent")
def bench_intent(runs: int) -> Figures:
    """The face-act model, per utterance with its preceding turns as context."""
    return _detector_suite("intent", runs)


@suite("monitor")
def bench_monitor(runs: int) -> Figures:
    """All local detectors through the monitor on a 200-turn conversation."""
    from guardian.detectors import registry
    from guardian.monitor import Monitor

    names = registry.default_names()
    detectors = registry.create_many(names)
    for d in detectors:
        d.warm_up()
    fresh = _Fresh()
    rates: list[float] = []

    def one_pass() -> list[float]:
        conv = fresh.conversation(200)
        monitor = Monitor(detectors, window=10, timeout_s=30.0)
        out = []
        began_all = time.perf_counter()
        try:
            for turn in conv.turns:
                began = time.perf_counter()
                monitor.add_turn_sync("bench", turn.speaker, turn.text)
                out.append((time.perf_counter() - began) * 1000)
        finally:
            monitor.close()
        rates.append(len(out) / (time.perf_counter() - began_all))
        return out

    figures: Figures = {"detectors": names, "turns": 200, "per_turn": latency_runs(one_pass, runs=runs)}
    figures["turns_per_s"] = round(statistics.median(rates[1:]), 2)
    return figures


#: Transcript lengths of the `scale` suite: the cost per turn must not grow with them.
SCALE_TURNS = (1_000, 10_000, 100_000)


def scale_figures(sizes: Sequence[int], *, runs: int, window: int = 10) -> Figures:
    """Seconds to assess every turn of transcripts of `sizes` turns with the key-phrase
    detector, as `guardian analyze -d keyphrases` does (windows of `window` turns).

    Each size is the median of `runs` runs, except that the 100,000-turn transcript and
    larger run once per five runs (at least once). `per_turn_ms` must stay flat across
    sizes: a window that copied the turns before it once made 100,000 turns never finish.
    """
    from guardian.analyze import assess_turns
    from guardian.detectors import registry

    detector = registry.create("keyphrases")
    detector.warm_up()
    texts = [(t.speaker, t.text) for conv in _dialogues(200) for t in conv.turns]
    seconds: dict[str, float] = {}
    per_turn: dict[str, float] = {}
    for size in sizes:
        conv = Conversation.from_pairs((texts[i % len(texts)] for i in range(size)), id=f"scale-{size}")
        times = []
        for _ in range(runs if size < 100_000 else max(1, runs // 5)):
            began = time.perf_counter()
            assess_turns(conv, [detector], window=window)
            times.append(time.perf_counter() - began)
        seconds[str(size)] = round(statistics.median(times), 3)
        per_turn[str(size)] = round(seconds[str(size)] * 1000 / size, 4)
    return {"detector": "keyphrases", "window_turns": window, "seconds": seconds, "per_turn_ms": per_turn}


@suite("scale")
def bench_scale(runs: int) -> Figures:
    """Seconds for 1k, 10k and 100k turns with the key-phrase detector (linear growth)."""
    return scale_figures(SCALE_TURNS, runs=runs)


@suite("middleware")
def bench_middleware_suite(runs: int) -> Figures:
    """GuardianMiddleware's overhead per model call in a real create_agent (model answers instantly)."""
    from guardian.eval.bench_middleware import bench_middleware

    return bench_middleware(runs, dialogues=30)


@suite("bulk")
def bench_bulk_suite(runs: int) -> Figures:
    """`guardian analyze ARCHIVE --out`: dialogues/s with --jobs 1, --jobs 2 and Ray (2 workers), memory per worker."""
    from guardian.eval.bench_bulk import bench_bulk

    return bench_bulk(runs)


@suite("serve")
def bench_serve_suite(runs: int) -> Figures:
    """`guardian serve` over HTTP: one turn's latency, 100 concurrent conversations x 20 turns."""
    from guardian.eval.bench_serve import bench_serve

    return bench_serve(runs)


@suite("index")
def bench_index_suite(runs: int) -> Figures:
    """The example store: embed and index mentalmanip_con (temporary folder), then k=3 queries."""
    from guardian.eval.bench_index import bench_index

    return bench_index(runs)


@suite("watch")
def bench_watch_suite(runs: int) -> Figures:
    """`guardian watch`'s TUI with a 300 ms detector: typed turn and its assessment on screen, loop lag."""
    from guardian.eval.bench_watch import bench_watch

    return bench_watch(runs)


@suite("audio")
def bench_audio(runs: int) -> Figures:
    """`listen --fast` on a synthesised mono dialogue: RTF, end of utterance -> assessment, WER, speakers."""
    import tempfile
    from pathlib import Path

    from guardian.audio.pipeline import AudioPipeline, TurnHeard
    from guardian.audio.sources import FileSource
    from guardian.audio.speakers import EmbeddingSpeakers, SpeakerEncoder
    from guardian.audio.transcribe import Transcriber
    from guardian.detectors import registry
    from guardian.eval.speech import speaker_word_accuracy, synthesize_dialogue, word_errors
    from guardian.monitor import Monitor

    workdir = Path(tempfile.mkdtemp(prefix="guardian-bench-audio-"))
    # One unseen MentalManip dialogue per run (warm-up included): detectors cache per utterance.
    texts = [c for c in _dialogues(200) if 6 <= len(c) <= 8 and c.speakers == ("Person1", "Person2")][: runs + 1]
    voices = {"Person1": "en-us+m3", "Person2": "en-gb+f3"}
    spoken = iter(
        synthesize_dialogue([(t.speaker, t.text) for t in c.turns], voices, workdir, name=f"bench{i}")
        for i, c in enumerate(texts)
    )
    transcriber = Transcriber()
    transcriber.warm_up()
    encoder = SpeakerEncoder()
    encoder.warm_up()
    detectors = registry.create_many(registry.default_names())
    for d in detectors:
        d.warm_up()
    rtfs: list[float] = []
    wers: list[float] = []
    speakers_right: list[float] = []

    def one_pass() -> list[float]:
        synth = next(spoken)
        source = FileSource(synth.mono, realtime=False)
        pipeline = AudioPipeline(source, transcriber=transcriber, speakers=EmbeddingSpeakers(encoder=encoder))
        monitor = Monitor(detectors, window=10, timeout_s=30.0)
        latencies: list[float] = []
        heard: list[tuple[str, str]] = []
        began = time.perf_counter()
        try:
            for event in pipeline.events():
                if isinstance(event, TurnHeard):
                    t0 = time.perf_counter()
                    turn = event.turn
                    heard.append((turn.speaker, turn.text))
                    monitor.add_turn_sync("call", turn.speaker, turn.text, start=turn.start, end=turn.end, source="audio")
                    latencies.append((event.latency_s + time.perf_counter() - t0) * 1000)
        finally:
            monitor.close()
        rtfs.append((time.perf_counter() - began) / source.duration)
        said = [(t.speaker, t.text) for t in synth.turns]
        wers.append(word_errors(" ".join(t for _, t in said), " ".join(t for _, t in heard)).wer)
        speakers_right.append(speaker_word_accuracy(said, heard))
        return latencies

    figures: Figures = {
        "audio": "per run, one unseen MentalManip dialogue (6-8 turns) spoken by two espeak-ng voices, mono mix, --fast",
        "detectors": [d.name for d in detectors],
        "end_of_utterance_to_assessment": latency_runs(one_pass, runs=runs),
    }
    figures["rtf"] = round(statistics.median(rtfs[1:]), 4)
    figures["wer"] = round(statistics.median(wers[1:]), 4)  # lab/audio_sweep.py: the clips and settings swept
    figures["speaker_word_accuracy"] = round(statistics.median(speakers_right[1:]), 4)
    return figures


def run_suite(name: str, *, runs: int) -> Figures:
    if name not in SUITES:
        from guardian.errors import GuardianError

        raise GuardianError(f"unknown bench suite {name!r}; choose from {', '.join(sorted(SUITES))} or all")
    began = time.perf_counter()
    try:
        figures = SUITES[name](runs)
    except Exception as exc:  # one broken suite must not hide the others' figures
        figures = {"error": f"{type(exc).__name__}: {exc}"}
    figures["peak_rss_mb"] = peak_rss_mb()
    figures["wall_s"] = round(time.perf_counter() - began, 1)
    return figures


def run_bench(suites: Sequence[str], *, runs: int = 5, isolate: bool = True) -> dict[str, Any]:
    """Run suites, each in its own process when `isolate` (peak RSS per suite)."""
    out: dict[str, Any] = {"machine": machine(), "runs": runs, "suites": {}}
    for name in suites:
        if not isolate:
            out["suites"][name] = run_suite(name, runs=runs)
            continue
        proc = subprocess.run(
            [sys.executable, "-m", "guardian.eval.bench", name, str(runs)],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            out["suites"][name] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            out["suites"][name] = {"error": f"suite process failed (exit {proc.returncode}): {tail}"}
    return out


def run_command(suite: str, *, output_format: str, runs: int) -> str:
    """`guardian bench`: `suite` is a name, several comma-separated, or "all"; the JSON to print."""
    names = sorted(SUITES) if suite == "all" else [s.strip() for s in suite.split(",")]
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        from guardian.errors import GuardianError

        raise GuardianError(f"unknown suite {unknown[0]!r}; choose from {', '.join(sorted(SUITES))} or all")
    return json.dumps(run_bench(names, runs=runs), indent=None if output_format == "json" else 2)


if __name__ == "__main__":
    print(json.dumps(run_suite(sys.argv[1], runs=int(sys.argv[2]))))
