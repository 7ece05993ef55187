"""Screening archives: `guardian analyze` over many conversations (issue 23).

One conversation in, one results row out, whatever runs it: the per-conversation
work (`screen.screen_batch`) is `guardian.analyze.assess_turns` with the default
detectors, so a row says what `guardian analyze FILE` says. Around it: inputs
(a directory of transcripts, a conversations JSONL, Parquet), two engines (local
processes, Ray Data), and a sink that resumes an interrupted run without writing
a row twice.
"""
