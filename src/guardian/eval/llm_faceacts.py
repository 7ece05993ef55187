"""`guardian eval faceacts FILE --detector llm|cascade`: the LLM intent agent measured on a face-act CSV.

The local intent model and the LLM second opinion answer the same question (which face act is the
latest turn); a user choosing between them, or a team checking a new endpoint, needs both scored on
the same held-out turns with the same metrics. Each row is asked as the product asks it: the agent
reads a window of the conversation that ends with the row's turn (the file's earlier turns of that
conversation, and for a stretch that starts mid-way, the turn before it as the file records it).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardian.conversation import Conversation, Turn
from guardian.corpora.datasets import FaceActUtterance
from guardian.errors import InputError, ModelUnavailable
from guardian.eval.timing import percentile
from guardian.taxonomy import FaceAct

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from guardian.config import LLMSettings
    from guardian.corpora.conversations import Split as Part

#: Who said the turn before a stretch that starts mid-way: the file does not say.
EARLIER_SPEAKER = "Earlier speaker"
#: Turns the agent reads, the row's included (the LLM detector's default window).
WINDOW = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class FaceActWindow:
    """One row to ask about: its index in the file and the conversation up to its turn."""

    row: int
    window: Conversation


def faceact_windows(rows: Sequence[FaceActUtterance], indices: Sequence[int], *, size: int = WINDOW) -> list[FaceActWindow]:
    """The window each of `indices` is asked with, in the file's turn order per conversation.

    Turn numbers are the file's, so the prompt's `[turn N]` is the turn's place in its dialogue."""
    by_conv: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_conv[r.conversation_id].append(i)
    out: list[FaceActWindow] = []
    wanted = set(indices)
    for conv, idx in by_conv.items():
        idx.sort(key=lambda i: rows[i].turn)
        first = rows[idx[0]]
        turns: list[Turn] = []
        if first.previous and first.turn > 0:
            turns.append(Turn(index=first.turn - 1, speaker=EARLIER_SPEAKER, text=first.previous))
        for i in idx:
            r = rows[i]
            own = Turn(index=r.turn, speaker=r.speaker, text=r.utterance)
            before = [t for t in turns[-size:] if t.index < r.turn]  # a repeated turn number is not its own context
            if i in wanted:
                out.append(FaceActWindow(row=i, window=Conversation(id=conv, turns=(*before[max(0, len(before) - size + 1):], own))))
            if not turns or r.turn > turns[-1].index:
                turns.append(own)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRun:
    """What the agent said for the windows it was asked about, and what that cost."""

    rows: tuple[int, ...]
    predicted: tuple[FaceAct | None, ...]
    failures: int
    latency_ms: tuple[float, ...]

    def latency(self) -> dict[str, float]:
        lat = self.latency_ms or (0.0,)
        return {"latency_ms_p50": round(percentile(lat, 0.5), 1), "latency_ms_p95": round(percentile(lat, 0.95), 1)}


def run_agent(windows: Sequence[FaceActWindow], analyze: Callable[[Conversation], FaceAct | None],
              *, progress: Callable[[int], None] | None = None) -> AgentRun:
    """Ask `analyze` about each window; None (no answer: the endpoint failed) is counted, not guessed."""
    predicted: list[FaceAct | None] = []
    latency: list[float] = []
    for w in windows:
        started = time.perf_counter()
        predicted.append(analyze(w.window))
        latency.append((time.perf_counter() - started) * 1000)
        if progress is not None:
            progress(1)
    return AgentRun(rows=tuple(w.row for w in windows), predicted=tuple(predicted),
                    failures=sum(p is None for p in predicted), latency_ms=tuple(latency))


def evaluate_file(
    path: str | Path, *, detector: str = "llm", split: Part | None = None, limit: int | None = None,
    model: BaseChatModel | None = None, settings: LLMSettings | None = None, show_progress: bool = False,
) -> dict[str, Any]:
    """Face-act accuracy, macro-F1 and per-act figures on a face-act CSV (or its `split` part), the
    shown intents' precision, what the LLM cost, and how often it gave no answer.

    `detector`: `llm`, the agent on every turn; `cascade`, the cascade's policy with `llm.intents`:
    the local intent model on every turn (run as `guardian eval faceacts` runs it), the agent only
    where the local model withholds its intent. `limit`: a seeded sample of that many conversations
    (every turn of each), since an endpoint is slow or paid per call."""
    from tqdm import tqdm

    from guardian.corpora.conversations import split_of
    from guardian.corpora.datasets import load_faceacts
    from guardian.detectors.intent.train import metrics
    from guardian.detectors.llm.intent import IntentAgent
    from guardian.detectors.llm.manipulation import LLMDetector
    from guardian.eval.llm_eval import sample

    if detector not in ("llm", "cascade"):
        raise InputError(f"--detector must be local, llm or cascade, not {detector!r}")
    rows = load_faceacts(Path(path))
    keep = [i for i, r in enumerate(rows) if split is None or split_of(r.conversation_id) == split]
    if not keep:
        raise InputError("no utterances in the file" + (f" in its {split} part" if split else ""), source=str(path))
    if limit is not None:
        picked = set(sample(sorted({rows[i].conversation_id for i in keep}), limit))
        keep = [i for i in keep if rows[i].conversation_id in picked]
    llm = LLMDetector(model=model, settings=settings, use_store=False)
    if llm.unavailable:
        raise ModelUnavailable(f"cannot evaluate the LLM intent agent: {llm.unavailable}")
    local = local_intents(rows, keep, path=Path(path), part=split) if detector == "cascade" else {}
    agent = IntentAgent(llm.client, samples=llm.cfg.samples, detector="llm")
    failures: list[str] = []

    def analyze(window: Conversation) -> FaceAct | None:
        intent, error = agent.analyze(window)
        if intent is None and error is not None:
            failures.append(str(error))
        return intent.face_act if intent is not None else None

    windows = [w for w in faceact_windows(rows, keep) if not local.get(w.row, (None, False))[1]]
    with tqdm(total=len(windows), desc="asking the LLM intent agent", disable=not show_progress, leave=False) as bar:
        run = run_agent(windows, analyze, progress=bar.update)
    asked = dict(zip(run.rows, run.predicted, strict=True))
    if windows and run.failures == len(windows):
        raise ModelUnavailable(f"the LLM intent agent answered none of {len(windows)} turns"
                               + (f" (first error: {failures[0]})" if failures else ""))
    # What a user is shown for each turn (None: nothing), and the act scored for accuracy: the shown
    # one, else the local model's withheld guess (cascade) or no score at all (llm, unanswered).
    shown = {i: (local[i][0] if i in local and local[i][1] else asked.get(i)) for i in keep}
    scored = [i for i in keep if shown[i] is not None or i in local]
    gold = [rows[i].face_act for i in scored]
    result = metrics(gold, [shown[i] or local[i][0] for i in scored])
    right = [shown[i] == rows[i].face_act for i in keep if shown[i] is not None]
    result["shown_share"] = round(len(right) / len(keep), 4)
    result["shown_precision"] = round(sum(right) / len(right), 4) if right else None
    result.update(run.latency())
    what = ("LLM intent agent" if detector == "llm" else
            "cascade: local intent model, the LLM intent agent where it withholds")
    result["mode"] = (f"{what} ({llm.cfg.samples} sample(s) a turn; asked about {len(windows)} of {len(keep)} turns, "
                      f"{len(windows) - run.failures} answered)" + (f", {split} part" if split else ""))
    result["llm_asked"] = len(windows)
    result["unanswered"] = run.failures
    result["llm_calls"] = agent.usage.calls
    result["llm_failed_calls"] = agent.usage.failed_calls
    result["llm_tokens"] = agent.usage.tokens
    return result


def local_intents(rows: Sequence[FaceActUtterance], keep: Sequence[int], *, path: Path | None = None,
                   part: Part | None = None) -> dict[int, tuple[FaceAct, bool]]:
    """Each row's (local top act, whether it is shown), as `guardian eval faceacts` scores the model
    (which refuses a file, or part of one, that the model trained on)."""
    from guardian.detectors.intent.cli import check_held_out
    from guardian.detectors.intent.model import load_model
    from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context

    model = load_model()
    if path is not None:
        check_held_out(path, model, part)
    order, probs = predict_in_turn_order(model, rows, utterances_in_context(rows), keep)
    return {i: (model.classes[int(p.argmax())], bool(p.max() >= model.abstain_below))
            for i, p in zip(order, probs, strict=True)}
