"""`guardian index`: build the example store from labelled dialogues, with a progress bar (tqdm)."""

from __future__ import annotations

from pathlib import Path

from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.errors import InputError
from guardian.retrieval.store import BuildReport, ExampleStore


def resolve_data(data: str | Path | None) -> Path:
    """A MentalManip CSV: the file given, `mentalmanip_con.csv` inside a folder, or the bundled one."""
    if data is None:
        return mentalmanip_path("con")
    path = Path(data)
    if path.is_file():
        return path
    for candidate in (path / "mentalmanip" / "mentalmanip_con.csv", path / "mentalmanip_con.csv"):
        if candidate.is_file():
            return candidate
    if path.is_dir():
        raise InputError("no mentalmanip_con.csv in this folder (or its mentalmanip/ subfolder)", source=str(path))
    raise InputError("file not found", source=str(path))


def run_index(*, data: str | Path | None = None, rebuild: bool = False, store: ExampleStore | None = None) -> BuildReport:
    """Index the labelled dialogues; only what is missing is embedded (ids = dataset ids).

    The bar is guardian's one progress helper (tqdm on stderr, `guardian.progress`); nothing is
    drawn when everything is already indexed."""
    from guardian.progress import tqdm_progress

    csv_path = resolve_data(data)
    dialogues = load_mentalmanip(csv_path)
    store = store or ExampleStore.from_settings()
    bar = tqdm_progress("embedding dialogues")

    def progress(done: int, total: int) -> None:
        if total:
            bar("", done, total)

    return store.build(dialogues, source=csv_path.stem, rebuild=rebuild, progress=progress)


def describe(report: BuildReport, where: str) -> str:
    lines = []
    if report.rebuilt:
        lines.append(f"rebuilt: {report.rebuilt}")
    lines.append(
        f"example store at {where}: {report.total} dialogues "
        f"({report.added} added, {report.removed} removed) in {report.seconds:.1f}s"
    )
    return "\n".join(lines)
