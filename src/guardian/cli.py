"""The `guardian` command line.

Commands are thin: they parse options, call a module that does the work, and
render. Errors a user can fix are printed as one sentence (exit 2); anything
else is an internal error (exit 1), with the traceback only under --debug.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from guardian import __version__
from guardian.errors import GuardianError
from guardian.eval.commands import (
    EncoderOption,
    EscalationOption,
    LayersOption,
    RetrainOption,
    eval_app,
)
from guardian.terminal_text import terminal_safe

app = typer.Typer(
    name="guardian",
    help="Watch a conversation and say, turn by turn, whether someone is being manipulated, how, "
    "and quote the words that show it.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(eval_app, name="eval")

err_console = Console(stderr=True)
_debug = False


def _version(value: bool) -> None:
    if value:
        typer.echo(f"guardian {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for internal errors.")] = False,
) -> None:
    global _debug
    _debug = debug
    from guardian.encoding.sentence_encoder import precision_setting

    precision_setting()  # a bad GUARDIAN_ENCODER_PRECISION is one sentence, exit 2, before any work


def say_error(message: str, *, label: str = "error") -> None:
    """One line on stderr. The message is text, not Rich markup, with control characters and bidi
    overrides shown: it can quote a file name or a transcript line, which must neither restyle
    the line (`[/]` once crashed the error handler) nor drive the terminal."""
    line = Text(f"{label}:", style="bold red")
    line.append(" " + terminal_safe(message, one_line=True))
    err_console.print(line, highlight=False, soft_wrap=True)


def fail(message: str, *, code: int = 2) -> typer.Exit:
    """Print one plain sentence to stderr and return the exit to raise."""
    say_error(message)
    return typer.Exit(code)


# --- foundation: analyze ---------------------------------------------------------------------


@app.command()
def analyze(
    file: Annotated[
        str,
        typer.Argument(help="Transcript file, or '-' to read standard input; a folder of transcripts, a "
                       "conversations .jsonl or a .parquet to screen many (with --out)."),
    ],
    output_format: Annotated[
        str, typer.Option("--format", "-f", help="text | json | jsonl | markdown")
    ] = "text",
    detectors: Annotated[
        str | None,
        typer.Option("--detectors", "-d", help=(
            "Comma-separated detector names (see `guardian detectors`). Default: the configured ones, else "
            "keyphrases,local,intent; an archive run (--out) leaves intent out (docs/bulk.md)."
        )),
    ] = None,
    input_format: Annotated[
        str, typer.Option("--input-format", help="auto | lines | jsonl | whatsapp | vtt | srt")
    ] = "auto",
    window: Annotated[int | None, typer.Option("--window", "-w", help="Turns of context per assessment.")] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Bulk: write one row per conversation to results.parquet or results.jsonl "
                     "(an earlier run's rows are kept and skipped: the run resumes)."),
    ] = None,
    per_turn: Annotated[bool, typer.Option("--per-turn", help="Bulk: also write one row per turn (results.turns.*).")] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Bulk: worker processes (local) or actors (ray).")] = 1,
    engine: Annotated[str, typer.Option("--engine", help="Bulk: local | ray")] = "local",
    address: Annotated[
        str | None, typer.Option("--address", help="Bulk, ray: 'auto' or ray://host:10001 (default: start a local Ray).")
    ] = None,
    flush_rows: Annotated[
        int, typer.Option("--flush-rows", min=1, help="Bulk: rows per written chunk (a kill loses at most these).")
    ] = 256,
    explain: Annotated[
        bool, typer.Option("--explain", help="Text: each flagged turn's card in full (every score, plain words).")
    ] = False,
) -> None:
    """Assess every turn of a transcript and print the findings with their quoted evidence.

    A directory of transcripts, a conversations .jsonl or a .parquet (or any input with --out)
    is screened in bulk: one results row per conversation, see docs/bulk.md.
    """
    from guardian.analyze import OutputFormat, run_analyze
    from guardian.bulk.inputs import is_bulk_input

    if out is not None or is_bulk_input(file):
        from guardian.bulk.command import run_bulk_command

        run_bulk_command(file, out=out, detectors=detectors, input_format=input_format, window=window,
                         per_turn=per_turn, jobs=jobs, engine=engine, address=address, flush_rows=flush_rows,
                         output_format=output_format)
        return
    try:
        fmt = OutputFormat(output_format)
    except ValueError:
        raise fail(f"--format must be one of {', '.join(f.value for f in OutputFormat)}") from None
    run_analyze(file, output_format=fmt, detectors=detectors, input_format=input_format, window=window,
                explain=explain)


@app.command("detectors")
def list_detectors() -> None:
    """List the installed detectors (built-in and plug-ins)."""
    from guardian.detectors import registry

    for name in registry.names():
        factory = registry.factory(name)
        description = getattr(factory, "description", "")
        typer.echo(f"{name:14} {description}")


# --- local model (issue 3): train, eval mentalmanip ----------------------------------------------


@app.command()
def train(
    data: Annotated[
        list[str] | None,
        typer.Option("--data", help="MentalManip CSV file or folder (repeatable); default: the bundled data/."),
    ] = None,
    conversations: Annotated[
        list[str] | None,
        typer.Option("--conversations", help="Conversations JSONL (repeatable); default: data/conversations/*.jsonl."),
    ] = None,
    out: Annotated[
        str | None, typer.Option("--out", help="Artifact folder; default: the user cache (what the detector loads).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the split and the initial weights.")] = 17,
    epochs: Annotated[int | None, typer.Option("--epochs", min=1, help="Training epochs (default 30).")] = None,
    reply_pair: Annotated[
        bool, typer.Option("--reply-pair/--no-reply-pair",
                           help="Fine-tune the (turn, turn before) pair head that screens chatbot replies and, with the "
                                "turn-labelled dialogues, joins the network on every other turn (2-7 min more; "
                                "needs the chatbot exchanges of the default data).")
    ] = True,
) -> None:
    """Train the local turn-level manipulation model (a few minutes on 2 cores, most of it embedding turns)."""
    from guardian.eval.local_eval import run_train

    typer.echo(run_train(data=data, out=out, seed=seed, conversations=conversations, epochs=epochs,
                         reply_pair=reply_pair))


@app.command("train-intent")
def train_intent(
    out: Annotated[
        str | None, typer.Option("--out", help="Folder for the artifact (default: the user cache).")
    ] = None,
    data: Annotated[str | None, typer.Option("--data", help="Face-act CSV (default: the bundled one).")] = None,
    linear_only: Annotated[
        bool, typer.Option("--linear-only", help="Train only the linear model (a minute or two, less accurate).")
    ] = False,
    encoder: EncoderOption = None,
    layers: LayersOption = None,
    retrain: RetrainOption = False,
    escalation: EscalationOption = True,
    everyday: Annotated[
        str | None,
        typer.Option("--everyday", help="Only fit the everyday head (domain gate, everyday tuned half, abstention "
                     "threshold) on this everyday face-act CSV's train/dev parts, on top of the halves already built."),
    ] = None,
    everyday_half: Annotated[
        str | None,
        typer.Option("--everyday-half", help="With --everyday: a folder holding an everyday tuned half already "
                     "trained by the same recipe (tuned.npz), instead of fine-tuning one (10-30 min)."),
    ] = None,
    threshold_only: Annotated[
        bool,
        typer.Option("--threshold-only", help="With --everyday: keep every weight and only choose the abstention "
                     "threshold again on the file's dev part, as this machine's runtime scores it (a minute or two)."),
    ] = False,
    distilled: Annotated[
        str | None,
        typer.Option("--distilled", help="With --everyday: train-part turns labelled once by an LLM from the same "
                     "guidelines (data/faceacts/everyday_distilled.csv), learnt beside the file's train part."),
    ] = None,
) -> None:
    """Rebuild the intent (face-act) model from the labelled data, deterministically."""
    from guardian.detectors.intent.cli import run_train_intent

    run_train_intent(out=out, data=data, linear_only=linear_only, encoder=encoder, layers=layers, retrain=retrain,
                     escalate=escalation, everyday=everyday, everyday_half=everyday_half,
                     threshold_only=threshold_only, distilled=distilled)


# --- retrieval + LLM agents (issue 5): index --------------------------------------------------


@app.command()
def index(
    data: Annotated[
        str | None,
        typer.Option("--data", help="MentalManip CSV, or a folder holding mentalmanip_con.csv; default: bundled data/."),
    ] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Drop the store and embed everything again.")] = False,
) -> None:
    """Build the example store (Chroma) the LLM second opinion takes its few-shot examples from."""
    from guardian.retrieval.indexing import describe, run_index
    from guardian.retrieval.store import ExampleStore

    store = ExampleStore.from_settings()
    typer.echo(describe(run_index(data=data, rebuild=rebuild, store=store), store.where))


# --- monitor + TUI (issue 6): watch, report ---------------------------------------------------


@app.command()
def watch(
    file: Annotated[
        str | None,
        typer.Argument(help="Transcript or chat log; '-' reads standard input; none: type the chat yourself."),
    ] = None,
    speed: Annotated[float | None, typer.Option("--speed", help="Replay speed in turns per second.")] = None,
    instant: Annotated[bool, typer.Option("--instant", help="Replay as fast as the detectors allow.")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-F", help="Keep reading what is appended to FILE.")] = False,
    headless: Annotated[
        bool, typer.Option("--headless", help="Print JSON Lines events instead of the TUI (automatic in a pipe).")
    ] = False,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Reopen a session log and continue it.")
    ] = None,
    detectors: Annotated[
        str | None, typer.Option("--detectors", "-d", help="Comma-separated detector names.")
    ] = None,
    log: Annotated[Path | None, typer.Option("--log", help="Where to write the session log.")] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not write a session log.")] = False,
    input_format: Annotated[
        str, typer.Option("--input-format", help="auto | lines | jsonl | whatsapp | vtt | srt")
    ] = "auto",
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="Serve Prometheus metrics (screens, flags by technique, errors, latency) on 127.0.0.1:PORT/metrics."),
    ] = None,
) -> None:
    """Watch a conversation turn by turn: findings with quotes as they appear (TUI or JSON Lines)."""
    from guardian.tui.launch import run_watch
    from guardian.watch import WatchOptions

    names = tuple(n.strip() for n in detectors.split(",") if n.strip()) if detectors else None
    if follow and (file is None or file == "-"):
        raise fail("--follow needs a file to follow")
    if resume is not None and log is not None:
        raise fail("--resume continues the given log; leave out --log")
    raise typer.Exit(
        run_watch(
            WatchOptions(
                file=file,
                speed=speed,
                instant=instant,
                follow=follow,
                headless=headless,
                resume=resume,
                detectors=names,
                log=log,
                no_log=no_log,
                input_format=input_format,
            ),
            metrics_port=metrics_port,
        )
    )


@app.command()
def report(
    log: Annotated[
        Path, typer.Argument(help="A session log written by `guardian watch`, or the --out table of a bulk `guardian analyze`.")
    ],
    output_format: Annotated[str, typer.Option("--format", "-f", help="markdown (md) | html | json")] = "markdown",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the --output file if it exists.")] = False,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Results table: every conversation, not only the flagged ones.")
    ] = False,
) -> None:
    """Write a shareable report of a watched session, or of the flagged conversations of a bulk run."""
    from guardian.bulk.report import is_results_table, render_results
    from guardian.report import ReportFormat, render, write_report
    from guardian.session_log import read_log

    try:
        fmt = ReportFormat(output_format)
    except ValueError:
        raise fail(f"--format must be one of {', '.join(f.value for f in ReportFormat)}") from None
    if is_results_table(log):
        text = render_results(log, fmt=fmt, include_all=all_rows)
    else:
        record = read_log(log)
        text = render(record.events, fmt=fmt, title=f"guardian report: {record.source or log.name}")
    if output is None:
        sys.stdout.write(text)
    else:
        write_report(text, output, log=log, force=force)
        err_console.print(Text(f"report written to {terminal_safe(str(output), one_line=True)}"), highlight=False)

# --- audio (issue 7): listen, devices -----------------------------------------------------------


@app.command()
def listen(
    audio: Annotated[
        Path | None, typer.Option("--audio", "-a", help="Replay a recording (wav/mp3/m4a/ogg) instead of the microphone.")
    ] = None,
    fast: Annotated[bool, typer.Option("--fast", help="Replay the recording as fast as possible, not in real time.")] = False,
    channels: Annotated[
        bool, typer.Option("--channels", help="Stereo: each channel is one party (recorded calls).")
    ] = False,
    device: Annotated[str | None, typer.Option("--device", help="Input device index or name (see `guardian devices`).")] = None,
    speakers: Annotated[int | None, typer.Option("--speakers", help="Voices to tell apart on a mono mix (default 2).")] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Whisper model: a local CTranslate2 folder or a cached name.")
    ] = None,
    silence: Annotated[
        float | None, typer.Option("--silence", help="Seconds of silence that end an utterance.")
    ] = None,
    headless: Annotated[
        bool, typer.Option("--headless", help="Print JSON Lines events instead of the TUI (automatic in a pipe).")
    ] = False,
    detectors: Annotated[str | None, typer.Option("--detectors", "-d", help="Comma-separated detector names.")] = None,
    log: Annotated[Path | None, typer.Option("--log", help="Where to write the session log.")] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not write a session log.")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="Serve Prometheus metrics (screens, flags by technique, errors, latency) on 127.0.0.1:PORT/metrics."),
    ] = None,
) -> None:
    """Screen a voice call live: microphone or recording -> speech to text -> speakers -> detectors."""
    from guardian.audio.listen import ListenOptions
    from guardian.tui.launch import run_listen

    names = tuple(n.strip() for n in detectors.split(",") if n.strip()) if detectors else None
    options = ListenOptions(
        audio=audio, fast=fast, channels=channels, device=device, speakers=speakers, model=model,
        silence_s=silence, detectors=names, log=log, no_log=no_log,
    )
    raise typer.Exit(run_listen(options, headless=headless, metrics_port=metrics_port))


@app.command()
def devices() -> None:
    """List the audio input devices `guardian listen --device` can use."""
    from guardian.audio.sources import NO_MICROPHONE, list_input_devices

    found = list_input_devices()
    if not found:
        raise fail(NO_MICROPHONE)
    for d in found:
        mark = "*" if d.is_default else " "
        typer.echo(f"{mark} {d.index:3d}  {d.name}  ({d.channels} in, {d.default_samplerate:.0f} Hz, {d.hostapi})")


# --- service (issue 24): serve ------------------------------------------------------------------


@app.command()
def serve(
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default [serve] host, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", "-p", help="Port (default [serve] port, 8787).")] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", help="Worker processes (each loads the detectors).")] = 1,
    new_token: Annotated[
        bool, typer.Option("--new-token", help="Print a fresh token and the hash to put in [serve] tokens, then exit.")
    ] = False,
) -> None:
    """Serve conversations and calls over HTTP and WebSocket (docs/serve.md)."""
    from guardian.serve.command import run_serve_command

    text = run_serve_command(host=host, port=port, workers=workers, new_token=new_token)
    if text is not None:
        typer.echo(text)


# --- bench (issue 9): bench ---------------------------------------------------------------------


@app.command()
def bench(
    suite: Annotated[
        str, typer.Option("--suite", "-s", help="detect | intent | monitor | scale | audio | middleware | bulk | serve | index | watch | all (comma-separated for several)")
    ] = "all",
    output_format: Annotated[str, typer.Option("--format", "-f", help="json | text")] = "json",
    runs: Annotated[int, typer.Option("--runs", min=5, help="Measured runs per figure (median reported).")] = 5,
) -> None:
    """Measure latency, throughput and peak memory; prints one JSON object."""
    from guardian.eval.bench import run_command

    typer.echo(run_command(suite, output_format=output_format, runs=runs))


#: Write errors that mean "the output has nowhere to go" (a full disk, a dead device): the user's to fix.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what could not be written
    does not print a traceback after the one sentence already said."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: maps errors to exit codes (0 ok, 2 input/usage, 1 internal).

    A reader that goes away (`guardian analyze … | head -1`) is not an error (exit 0, silent);
    an output that cannot be written (`> /dev/full`) is one sentence and exit 2, not tracebacks
    and exit 0.
    """
    from guardian._env import apply_process_defaults

    apply_process_defaults()  # guardian's own process: offline, no telemetry, one torch thread
    try:
        result = app(args=argv, standalone_mode=False)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except SystemExit as exc:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":  # click's exit(1) on EPIPE: the reader left
            _silence_stdout()
            return 0
        raise exc
    except OSError as exc:
        if exc.errno not in _NO_ROOM:
            return _internal_error(exc)
        _silence_stdout()
        say_error(f"cannot write the output ({exc.strerror})")
        return 2
    except RecursionError:
        say_error("the input is nested too deeply to read")
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except GuardianError as exc:
        say_error(str(exc))
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except typer.Abort:
        return 130
    except Exception as exc:  # usage errors (typer's click exceptions) and genuine bugs
        show = getattr(exc, "show", None)
        if isinstance(exc, typer.TyperException) and callable(show):
            show()
            return int(getattr(exc, "exit_code", 2))
        return _internal_error(exc)
    return result if isinstance(result, int) else 0


def _internal_error(exc: Exception) -> int:
    if _debug:
        raise exc
    say_error(f"{type(exc).__name__}: {exc} (run with --debug for details)", label="internal error")
    return 1


if __name__ == "__main__":
    sys.exit(main())
