"""What `guardian eval faceacts` and `guardian train-intent` do (the CLI functions stay thin)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from guardian.errors import GuardianError, InputError

if TYPE_CHECKING:
    from guardian.corpora.conversations import Split as Part
    from guardian.detectors.intent.model import IntentModel
    from guardian.detectors.intent.tuned import TuneConfig
    from guardian.encoding.encoders import EncoderName


def _limit_threads() -> None:
    """Training shares a small machine: one thread unless the user asked for more."""
    if "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(1)


def _progress(description: str) -> Callable[[int, int], None]:
    """guardian's tqdm bar for (step, total) callbacks."""
    from guardian.progress import tqdm_progress

    bar = tqdm_progress(description)
    return lambda done, total: bar("", done, total)


def tune_config(encoder: str | None = None, layers: int | None = None) -> TuneConfig:
    """The shipped training recipe, with the encoder and its layer count as the user chose."""
    from guardian.detectors.intent.tuned import TuneConfig

    default = TuneConfig()
    try:
        # TuneConfig checks the name itself: an unknown one is a ValueError, said as one sentence
        return replace(default, encoder=cast("EncoderName", encoder or default.encoder),
                       layers=default.layers if layers is None else layers)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def escalation_config(tune: TuneConfig, *, escalate: bool) -> TuneConfig | None:
    """The shipped escalation half, unless turned off or the tuned half already is that model."""
    from guardian.detectors.intent.train import ESCALATION

    same = (tune.encoder, tune.layers) == (ESCALATION.encoder, ESCALATION.layers)
    return ESCALATION if escalate and not same else None


def run_eval_faceacts(
    file: str, *, output_format: str, cv: bool, linear_only: bool = False, retrain: bool = False,
    encoder: str | None = None, layers: int | None = None, escalate: bool = True, split: str | None = None,
) -> None:
    from guardian.detectors.intent.model import load_model
    from guardian.detectors.intent.train import evaluate_file

    tune = tune_config(encoder, layers)
    path, part = faceacts_part(file, split)
    _limit_threads()
    if cv:
        if not linear_only:
            typer.echo("cross-validating with fine-tuning in each of 5 folds: hours on 2 cores (about four with "
                       "the mpnet escalation half, one without: --no-escalation), minutes for folds cached by "
                       "an earlier run (--linear-only: a few minutes)", err=True)
        result = evaluate_file(path, cv=True, tune=None if linear_only else tune,
                               escalate=escalation_config(tune, escalate=escalate), reuse=not retrain,
                               progress=_progress("fine-tuning, 5 folds"), split=part)
    else:
        model = load_model()
        check_held_out(path, model, part)
        result = evaluate_file(path, model=model, split=part)
        if part == "dev" and model.everyday is not None and (
                model.everyday.meta.get("data_sha256") == _sha256(path) or _shares_everyday_train(path)):
            result["mode"] += " (dev part: the abstention threshold was chosen on it; --split test is held out)"
    print_faceacts(result, output_format=output_format)


def faceacts_part(file: str, split: str | None) -> tuple[Path, Part | None]:
    """The face-act CSV to score and the part of it asked for, or one sentence saying what is wrong."""
    path = Path(file)
    if not path.is_file():
        raise InputError("file not found", source=file)
    if split not in (None, "train", "dev", "test"):
        raise InputError(f"--split must be train, dev or test, not {split!r}")
    return path, cast("Part | None", split)


def check_held_out(path: Path, model: IntentModel, part: Part | None) -> None:
    """Refuse to score the local model on what it trained on (one sentence saying what to run instead)."""
    seen = _training_overlap(path, model.meta.get("data_sha256"))
    if seen:
        raise GuardianError(
            f"{seen} conversation(s) of {path} are in the intent model's training data, so its scores "
            "would be training-set scores; add --cv for out-of-fold figures"
        )
    _everyday_overlap(path, model.everyday.meta if model.everyday is not None else {}, part)


def print_faceacts(result: dict[str, Any], *, output_format: str) -> None:
    """The face-act metrics as JSON or a table (the local model's and the LLM agent's alike)."""
    if output_format == "json":
        typer.echo(json.dumps(result, sort_keys=True))
        return
    typer.echo(f"{result['mode']}")
    typer.echo(f"n={result['n']}  accuracy={result['accuracy']:.3f}  macro-F1={result['macro_f1']:.3f}  "
               f"latency p50={result['latency_ms_p50']:.1f} ms")
    if result.get("shown_precision") is not None:
        typer.echo(f"intents shown for {result['shown_share']:.1%} of the turns, right {result['shown_precision']:.1%} of the time")
    if "llm_calls" in result:
        typer.echo(f"LLM: asked about {result['llm_asked']} turns, {result['unanswered']} unanswered, "
                   f"{result['llm_calls']} calls, {result['llm_tokens']} tokens")
    typer.echo(f"{'act':8} {'P':>6} {'R':>6} {'F1':>6} {'n':>6}")
    for act, m in result["per_class"].items():
        typer.echo(f"{act:8} {m['precision']:6.3f} {m['recall']:6.3f} {m['f1']:6.3f} {m['support']:6d}")


def _sha256(path: Path) -> str:
    from guardian.corpora.datasets import file_sha256

    return file_sha256(path)


def _everyday_overlap(path: Path, trained: dict[str, object], part: Part | None) -> None:
    """The everyday head learnt from the train part of its file: scoring that part is not a test.
    The file it learnt from may since have grown (a later labelling round), so a file sharing a
    conversation with the bundled everyday set's train part counts as that file too."""
    if part in ("dev", "test") or not trained:
        return
    if trained.get("data_sha256") == _sha256(path) or _shares_everyday_train(path):
        raise GuardianError(f"the intent model's everyday head was trained on the train part of {path.name}; "
                            "score its held-out part with --split test (or dev)")


def _shares_everyday_train(path: Path) -> bool:
    from guardian.corpora.conversations import split_of
    from guardian.corpora.datasets import load_faceacts
    from guardian.locations import bundled_data_dir

    bundled = bundled_data_dir() / "faceacts" / "everyday.csv"
    if not bundled.is_file():
        return False
    train = {r.conversation_id for r in load_faceacts(bundled) if split_of(r.conversation_id) == "train"}
    return any(r.conversation_id in train for r in load_faceacts(path))


def _training_overlap(path: Path, trained_on: str | None) -> int:
    """How many conversations of `path` the model was trained on (checked against the bundled data).

    A whole-file hash is not enough: a subset of the training CSV would pass it and
    report training-set scores, so conversations are compared by their utterances.
    """
    from guardian.corpora.datasets import (
        FaceActUtterance,
        faceacts_path,
        file_sha256,
        load_faceacts,
    )

    def keys(rows: list[FaceActUtterance]) -> set[tuple[str, ...]]:
        by_conv: dict[str, list[FaceActUtterance]] = {}
        for r in rows:
            by_conv.setdefault(r.conversation_id, []).append(r)
        return {tuple(r.utterance for r in sorted(v, key=lambda r: r.turn)) for v in by_conv.values()}

    train = faceacts_path()
    if trained_on is None or not train.is_file() or file_sha256(train) != trained_on:
        return 0
    return len(keys(load_faceacts(path)) & keys(load_faceacts(train)))


def run_train_intent(
    *, out: str | None, data: str | None, linear_only: bool = False, encoder: str | None = None,
    layers: int | None = None, retrain: bool = False, escalate: bool = True, everyday: str | None = None,
    everyday_half: str | None = None, threshold_only: bool = False, distilled: str | None = None,
) -> None:
    from guardian.detectors.intent.model import cached_artifact_dir
    from guardian.detectors.intent.train import train_and_save

    if everyday is not None:
        _train_everyday(out=out, everyday=everyday, data=data, half=everyday_half, threshold_only=threshold_only,
                        distilled=distilled)
        return
    if distilled is not None:
        raise InputError("--distilled goes with --everyday FILE (the distilled turns join its train part)")
    if threshold_only:
        raise InputError("--threshold-only goes with --everyday FILE (the file whose dev part chooses it)")
    tune = tune_config(encoder, layers)
    escalation = escalation_config(tune, escalate=escalate)
    _limit_threads()
    target = Path(out) if out else cached_artifact_dir()
    if not linear_only:
        typer.echo(f"training the linear model, then fine-tuning {tune.encoder}"
                   + (" and the mpnet escalation half" if escalation is not None else "")
                   + " (15-20 min on one core for minilm, about 45 for mpnet cut to 6 layers; "
                   "--linear-only skips both, --no-escalation the second)", err=True)
    model = train_and_save(target, data=Path(data) if data else None,
                           tune=None if linear_only else tune, escalate=escalation, reuse=not retrain,
                           progress=_progress("fine-tuning"))
    kind = (f"linear + fine-tuned {tune.encoder}" if model.tuned is not None else "linear") + (
        " + mpnet escalation" if model.escalation is not None else "")
    typer.echo(f"intent model ({kind}, {len(model.classes)} face acts, {model.meta.get('n_train')} utterances) "
               f"written to {target}")


def _train_everyday(*, out: str | None, everyday: str, data: str | None, half: str | None,
                    threshold_only: bool = False, distilled: str | None = None) -> None:
    """Fit the everyday head on top of the halves already built (the bundled artifact, or the one
    in `out` when it has one) and write it beside them: the head and gate in minutes, the everyday
    tuned half in 10-30 more (or taken from `half`: an intent artifact folder, whose everyday half is
    reused, or a folder holding the half as tuned.npz). With `threshold_only`, every weight is kept
    and only the abstention threshold is chosen again on the dev part (a minute or two)."""
    import shutil

    from guardian.corpora.datasets import faceacts_path, file_sha256, load_faceacts
    from guardian.detectors.intent.domain import EVERYDAY_TUNED_FILE
    from guardian.detectors.intent.domain_train import (
        distilled_train_rows,
        rethreshold,
        train_everyday,
    )
    from guardian.detectors.intent.model import (
        IntentModel,
        bundled_artifact_dir,
        cached_artifact_dir,
    )
    from guardian.detectors.intent.tuned import TunedFaceActs

    path = Path(everyday)
    if not path.is_file():
        raise InputError("file not found", source=everyday)
    extra_path = Path(distilled) if distilled else None
    if extra_path is not None and not extra_path.is_file():
        raise InputError("file not found", source=distilled)
    if extra_path is not None and threshold_only:
        raise InputError("--threshold-only keeps every weight, so --distilled turns would not be read; drop one")
    try:  # checked first (before any file is copied), so that the sentence names the distilled file, not the everyday one
        extra = distilled_train_rows(load_faceacts(extra_path)) if extra_path else []
    except ValueError as exc:
        raise InputError(str(exc), source=distilled) from None
    _limit_threads()
    target = Path(out) if out else cached_artifact_dir()
    base = target if (target / "model.json").exists() else bundled_artifact_dir()
    if base != target:
        shutil.copytree(base, target, dirs_exist_ok=True)
    model = IntentModel.load(target)
    tuned = None
    if half and not threshold_only:  # an intent artifact folder (its everyday half), or a folder holding tuned.npz
        everyday_file = Path(half) / EVERYDAY_TUNED_FILE
        tuned = TunedFaceActs.load(Path(half), file=EVERYDAY_TUNED_FILE) if everyday_file.is_file() \
            else TunedFaceActs.load(Path(half))
    lead = "everyday threshold chosen again, weights kept" if threshold_only else "everyday head"
    try:
        rows = load_faceacts(path)
        if threshold_only:  # every weight kept: only the abstention threshold, on the dev part
            chosen = rethreshold(model, rows)
        else:
            chosen = train_everyday(model, load_faceacts(Path(data) if data else faceacts_path()), rows,
                                    data_sha256=file_sha256(path), tuned=tuned,
                                    distilled=extra, distilled_sha256=file_sha256(extra_path) if extra_path else None,
                                    progress=None if tuned else _progress("fine-tuning the everyday half"))
        assert model.everyday is not None
        model.everyday.save(target)
        if not threshold_only:
            # the halves were scored in float above; the runtime reads the saved int8 ones, so the
            # threshold is chosen again as they run (round 8: .748 in float, .734 as int8)
            model = IntentModel.load(target)
            chosen = {**chosen, **rethreshold(model, rows)}
            assert model.everyday is not None
            model.everyday.save(target)
    except ValueError as exc:
        raise InputError(str(exc), source=everyday) from None
    more = f" + {chosen['n_distilled']} distilled" if chosen.get("n_distilled") else ""
    typer.echo(f"{lead} ({chosen['n_train']} train utterances{more}; dev accuracy {chosen['dev_accuracy']:.3f}, "
               f"intents shown below {chosen['abstain_below']:.3f} withheld: precision {chosen['dev_shown_precision']:.3f} "
               f"on {chosen['dev_shown_share']:.0%} of the dev turns) written to {target}")
