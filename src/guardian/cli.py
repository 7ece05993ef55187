"""The `guardian` command line.

Commands are thin: they parse options, call a module that does the work, and
render. Errors a user can fix are printed as one sentence (exit 2); anything
else is an internal error (exit 1), with the traceback only under --debug.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from guardian import __version__
from guardian.errors import GuardianError

app = typer.Typer(
    name="guardian",
    help="Watch a conversation and say, turn by turn, whether someone is being manipulated, how, "
    "and quote the words that show it.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
eval_app = typer.Typer(help="Measure a detector on a labelled dataset (data the model never trained on).")
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


def fail(message: str, *, code: int = 2) -> typer.Exit:
    """Print one plain sentence to stderr and return the exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


# --- foundation: analyze ---------------------------------------------------------------------


@app.command()
def analyze(
    file: Annotated[str, typer.Argument(help="Transcript file, or '-' to read standard input.")],
    output_format: Annotated[
        str, typer.Option("--format", "-f", help="text | json | jsonl | markdown")
    ] = "text",
    detectors: Annotated[
        str | None,
        typer.Option("--detectors", "-d", help="Comma-separated detector names (see `guardian detectors`)."),
    ] = None,
    input_format: Annotated[
        str, typer.Option("--input-format", help="auto | lines | jsonl | whatsapp | vtt | srt")
    ] = "auto",
    window: Annotated[int | None, typer.Option("--window", "-w", help="Turns of context per assessment.")] = None,
) -> None:
    """Assess every turn of a transcript and print the findings with their quoted evidence."""
    from guardian.analyze import OutputFormat, run_analyze

    try:
        fmt = OutputFormat(output_format)
    except ValueError:
        raise fail(f"--format must be one of {', '.join(f.value for f in OutputFormat)}") from None
    run_analyze(file, output_format=fmt, detectors=detectors, input_format=input_format, window=window)


@app.command("detectors")
def list_detectors() -> None:
    """List the installed detectors (built-in and plug-ins)."""
    from guardian.detectors import registry

    for name in registry.names():
        factory = registry.factory(name)
        description = getattr(factory, "description", "")
        typer.echo(f"{name:14} {description}")


# --- local model (issue 3): train, eval mentalmanip ----------------------------------------------

# --- intent (issue 4): eval faceacts ------------------------------------------------------------

# --- retrieval + LLM agents (issue 5): index --------------------------------------------------

# --- monitor + TUI (issue 6): watch, report ---------------------------------------------------

# --- audio (issue 7): listen, devices -----------------------------------------------------------

# --- bench (issue 9): bench ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: maps errors to exit codes (0 ok, 2 input/usage, 1 internal)."""
    try:
        result = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except GuardianError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as exc:  # click usage errors and genuine bugs
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            return 130
        if _debug:
            raise
        err_console.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} (run with --debug for details)",
            highlight=False,
        )
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
