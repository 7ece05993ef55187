"""One registry for every detector, built-in or third-party.

Built-ins are declared as entry points in guardian's own pyproject.toml, in the
same `guardian.detectors` group a plugin package uses, so there is no second,
hand-maintained list that could drift from what is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from guardian._env import apply_process_defaults
from guardian.detectors.base import Detector
from guardian.errors import DetectorNotFound, GuardianError

GROUP = "guardian.detectors"
DetectorFactory = Callable[..., Detector]

_extra: dict[str, DetectorFactory] = {}


@cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def register(name: str, factory: DetectorFactory) -> None:
    """Register a detector at run time (tests, notebooks); entry points are the normal route."""
    _extra[name] = factory


def unregister(name: str) -> None:
    _extra.pop(name, None)


def names() -> list[str]:
    return sorted({*_entry_points(), *_extra})


def factory(name: str) -> DetectorFactory:
    """A detector's class (or factory) by name. Loading one is where guardian starts work inside
    an application, so the process defaults (`guardian._env`) are applied here, before the
    detector's module can import a model library."""
    apply_process_defaults()
    if name in _extra:
        return _extra[name]
    ep = _entry_points().get(name)
    if ep is None:
        known = ", ".join(names()) or "none"
        raise DetectorNotFound(f"no detector named {name!r} (installed: {known})")
    try:
        loaded = ep.load()
    except ImportError as exc:
        raise GuardianError(
            f"detector {name!r} could not be imported ({exc}); reinstall with `make setup`"
        ) from exc
    if not callable(loaded):
        raise GuardianError(f"entry point {name!r} does not point at a detector class or factory")
    return loaded


#: Local detectors used when none are named, in this order, if installed.
DEFAULT_ORDER = ("keyphrases", "local", "intent")
#: Defaults a bulk run leaves out unless named (`default_names(purpose="bulk")` says why).
BULK_SKIPS = frozenset({"intent"})


def default_names(*, purpose: str = "conversation") -> list[str]:
    """The one place the default detector set is decided.

    `conversation` (analyze, watch, listen, eval, bench): the configured detectors, else every
    installed local default. `chatbot` (the LangChain middleware, guard, callbacks): the local
    model alone when installed (a reply waits for the screen; the intent model's face acts are
    not a block decision), else the key phrases. `bulk` (`guardian analyze ARCHIVE --out`): the
    configured detectors, else the installed local defaults less the intent model: a results row
    has no face acts, the intent model's only part in it is its pressure-pattern findings (7 % of
    MentalManip rows; never a decision, probability, technique or manipulator), and it costs most
    of the time per turn (docs/bulk.md); `--detectors keyphrases,local,intent` runs it.
    """
    from guardian.config import settings

    if purpose == "chatbot":
        return ["local"] if "local" in names() else ["keyphrases"]
    if purpose not in ("conversation", "bulk"):
        raise ValueError(f"unknown purpose {purpose!r}; use conversation, bulk or chatbot")

    configured = settings().detectors
    if configured:
        return list(configured)
    installed = set(names())
    return [n for n in DEFAULT_ORDER if n in installed and not (purpose == "bulk" and n in BULK_SKIPS)]


def create(name: str, **options: Any) -> Detector:
    detector = factory(name)(**options)
    if not isinstance(detector, Detector):
        raise GuardianError(f"detector {name!r} did not produce a guardian Detector")
    return detector


def create_many(spec: str | list[str]) -> list[Detector]:
    """Detectors from a comma-separated spec or a list of names."""
    wanted = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    return [create(n) for n in wanted if n]
