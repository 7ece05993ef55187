"""`guardian eval ...`: the Typer sub-app that measures detectors on labelled data.

Kept beside the evaluation code it wires (the top-level `guardian.cli` only mounts it), so
the command line stays Typer glue under 500 lines. A bad option is a `GuardianError`: the
CLI's entry point prints it as one sentence and exits 2, as for every other command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from guardian.errors import GuardianError

eval_app = typer.Typer(help="Measure a detector on a labelled dataset (data the model never trained on).")

EncoderOption = Annotated[
    str | None,
    typer.Option("--encoder", help="Encoder the tuned half fine-tunes: minilm | mpnet (default: the shipped model's)."),
]
LayersOption = Annotated[
    int | None,
    typer.Option("--layers", help="Keep only the encoder's first N layers (0: all; default: the shipped model's)."),
]
RetrainOption = Annotated[
    bool,
    typer.Option("--retrain", help="Fine-tune afresh instead of reusing models cached by an earlier run on the "
                 "same rows and settings (eval: with --cv)."),
]
EscalationOption = Annotated[
    bool,
    typer.Option("--escalation/--no-escalation",
                 help="Re-assess the utterances the model is unsure of with mpnet cut to 6 layers (the shipped model)."),
]


@eval_app.command("keyphrases")
def eval_keyphrases(
    file: Annotated[str, typer.Argument(help="A MentalManip-format CSV.")],
    output_format: Annotated[str, typer.Option("--format", "-f", help="json | text")] = "text",
) -> None:
    """How often the key-phrase matcher fires on manipulative vs non-manipulative dialogues."""
    import json

    from guardian.eval.keyphrase_report import keyphrase_report

    report = keyphrase_report(file)
    if output_format == "json":
        typer.echo(json.dumps(report.as_dict()))
    else:
        for key, value in report.as_dict().items():
            typer.echo(f"{key:24} {value}")


@eval_app.command("mentalmanip")
def eval_mentalmanip(
    file: Annotated[str, typer.Argument(help="A MentalManip-format CSV (ID,Dialogue,Manipulative,Technique,Vulnerability).")],
    output_format: Annotated[str, typer.Option("--format", "-f", help="json | text")] = "text",
    artifact: Annotated[
        str | None, typer.Option("--artifact", help="Artifact folder to evaluate; default: the detector's own.")
    ] = None,
    sensitivity: Annotated[
        str | None,
        typer.Option("--sensitivity", help="low | medium | high (default: [local] sensitivity; high is MentalManip's best macro-F1)."),
    ] = None,
    detector: Annotated[
        str, typer.Option("--detector", "-d", help="local | llm | cascade (llm/cascade need llm.base_url).")
    ] = "local",
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="llm/cascade: a seeded random sample of N dialogues.")
    ] = None,
) -> None:
    """Measure the local model on a labelled CSV (use data it never trained on)."""
    import json

    from guardian.eval.local_eval import evaluate_file
    from guardian.eval.metrics import render_text

    if output_format not in ("json", "text"):
        raise GuardianError("--format must be json or text")
    if detector in ("llm", "cascade"):  # issue 5: same keys plus cost (calls, tokens) and latency
        from guardian.eval.llm_eval import evaluate_file as evaluate_llm

        result = evaluate_llm(file, detector=detector, limit=limit, show_progress=True)
        typer.echo(json.dumps(result) if output_format == "json" else "\n".join(f"{k:24} {v}" for k, v in result.items()))
        return
    if detector != "local":
        raise GuardianError("--detector must be local, llm or cascade")
    if sensitivity is not None and sensitivity not in ("low", "medium", "high"):
        raise GuardianError("--sensitivity must be low, medium or high")
    report = evaluate_file(file, artifact_dir=Path(artifact) if artifact else None, show_progress=True,
                           sensitivity=sensitivity)
    typer.echo(json.dumps(report.as_dict()) if output_format == "json" else render_text(report, title=file))

# --- live evaluation (issue 19): eval conversations -----------------------------------------------


@eval_app.command("conversations")
def eval_conversations(
    files: Annotated[
        list[str], typer.Argument(help="Conversations JSONL files ({id, label, turns: [{speaker, text}], meta}).")
    ],
    output_format: Annotated[str, typer.Option("--format", "-f", help="text | json (one object per file)")] = "text",
    detectors: Annotated[
        str | None, typer.Option("--detectors", "-d", help="Comma-separated detector names (default: as `watch`).")
    ] = None,
    window: Annotated[
        int | None, typer.Option("--window", "-w", min=1, help="Turns of context per assessment (default: the \\[monitor] window setting).")
    ] = None,
    split: Annotated[
        str, typer.Option("--split", help="all | train | dev | test: the part by a hash of the conversation id.")
    ] = "all",
    split_seed: Annotated[int, typer.Option("--split-seed", help="Seed of the split (training uses the same).")] = 17,
    ids: Annotated[
        Path | None, typer.Option("--ids", help="Only the conversations whose ids this file lists (one a line).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most N conversations per file.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="With --limit: a random sample of N drawn with this seed, not the first N.")
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, help="Windows per detector call; 1 times each turn alone, as live.")
    ] = 64,
) -> None:
    """Replay labelled conversations turn by turn as `guardian watch` would; how often each kind is flagged."""
    import json

    from guardian.config import settings
    from guardian.corpora.conversations import load_conversations
    from guardian.detectors import registry
    from guardian.eval import replay

    if output_format not in ("text", "json"):
        raise GuardianError("--format must be text or json")
    part = next((choice for choice in replay.SPLIT_CHOICES if choice == split), None)
    if part is None:
        raise GuardianError(f"--split must be one of {', '.join(replay.SPLIT_CHOICES)}")
    names = [n.strip() for n in detectors.split(",") if n.strip()] if detectors else registry.default_names()
    selection = replay.Selection(
        split=part, split_seed=split_seed, ids=replay.read_ids(ids) if ids is not None else None,
        limit=limit, sample_seed=seed,
    )
    loaded = [(file, load_conversations(file)) for file in files]  # every file readable before the replay
    options = replay.ReplayOptions(window=window or settings().monitor.window, batch=batch, show_progress=True)
    reports = []
    for report in replay.evaluate_files(loaded, detectors=registry.create_many(names), options=options,
                                        selection=selection):
        data = report.as_dict()
        if output_format == "json":
            typer.echo(json.dumps(data))
        reports.append(data)
    if output_format == "text":
        typer.echo(replay.render_text(reports))


# --- intent (issue 4): eval faceacts ------------------------------------------------------------


@eval_app.command("faceacts")
def eval_faceacts(
    file: Annotated[str, typer.Argument(help="Face-act CSV: conversation_id,turn,speaker,utterance,face_act.")],
    output_format: Annotated[str, typer.Option("--format", "-f", help="text | json")] = "text",
    cv: Annotated[
        bool,
        typer.Option("--cv", help="Cross-validate on the file itself (5 conversation folds, out-of-fold scores)."),
    ] = False,
    linear_only: Annotated[
        bool,
        typer.Option("--linear-only", help="With --cv: skip the MiniLM fine-tuning in each fold (minutes, not about an hour)."),
    ] = False,
    retrain: RetrainOption = False,
    encoder: EncoderOption = None,
    layers: LayersOption = None,
    escalation: EscalationOption = True,
    split: Annotated[
        str | None,
        typer.Option("--split", help="Only the conversations of this part (train | dev | test, split by a hash of "
                     "the conversation id): the everyday set's held-out part is `--split test`."),
    ] = None,
    detector: Annotated[
        str, typer.Option("--detector", "-d", help="local (the intent model) | llm (the LLM intent agent on every "
                          "turn; needs llm.base_url; llm.samples x 2 calls a turn) | cascade (the local model, the "
                          "agent where it withholds its intent)."),
    ] = "local",
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="llm, cascade: a seeded random sample of N conversations.")
    ] = None,
) -> None:
    """Face-act accuracy, macro-F1, per-class P/R/F1 and latency of the intent model on a CSV."""
    from guardian.detectors.intent.cli import run_eval_faceacts

    if output_format not in ("text", "json"):
        raise GuardianError("--format must be one of text, json")
    if detector in ("llm", "cascade"):
        from guardian.detectors.intent.cli import faceacts_part, print_faceacts
        from guardian.eval.llm_faceacts import evaluate_file

        if cv:
            raise GuardianError("--cv trains the local model; the LLM agent has nothing to train: drop --cv")
        path, part = faceacts_part(file, split)
        result = evaluate_file(path, detector=detector, split=part, limit=limit, show_progress=True)
        print_faceacts(result, output_format=output_format)
        return
    if detector != "local":
        raise GuardianError("--detector must be local, llm or cascade")
    run_eval_faceacts(file, output_format=output_format, cv=cv, linear_only=linear_only, retrain=retrain,
                      encoder=encoder, layers=layers, escalate=escalation, split=split)
