"""The labelled-example store: a Chroma collection of MentalManip dialogues.

Why Chroma: the same code runs embedded (a `PersistentClient` under the user's
data dir) or against a Chroma server (`HttpClient`) when many processes share one
store. Every collection is opened with guardian's own embedding function, so
Chroma never reaches for its default downloader, and telemetry is off.

The collection records which encoder embedded it; a store built by another
encoder, or one Chroma cannot read any more, is rebuilt (a corrupt folder is
moved aside, never deleted). Ids are dataset ids, so building twice adds nothing.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from guardian import locations
from guardian._env import apply_process_defaults
from guardian.conversation import Conversation
from guardian.corpora.datasets import LabelledDialogue
from guardian.errors import ConfigError, GuardianError
from guardian.grounding import normalize_quote
from guardian.retrieval.embedding import MiniLMEmbeddingFunction
from guardian.taxonomy import Technique, Vulnerability

STORE_VERSION = 1
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Example:
    """One retrieved labelled dialogue, ready to be shown to the LLM as a worked example."""

    id: str
    text: str
    manipulative: bool
    techniques: tuple[Technique, ...]
    vulnerabilities: tuple[Vulnerability, ...]
    distance: float


@dataclass(frozen=True, slots=True)
class BuildReport:
    total: int
    added: int
    removed: int
    seconds: float
    rebuilt: str | None = None  # why the store was rebuilt from scratch, if it was
    notes: tuple[str, ...] = field(default=())


def _flag(technique: Technique) -> str:
    return f"t_{technique.code}"


def _metadata(d: LabelledDialogue, *, source: str, split: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "label": int(d.manipulative),
        "techniques": ",".join(t.code for t in d.techniques),
        "vulnerabilities": ",".join(v.code for v in d.vulnerabilities),
        "source": source,
        "split": split,
    }
    # Chroma filters on scalar metadata, so each technique is also a boolean flag.
    for t in d.techniques:
        meta[_flag(t)] = True
    return meta


def _codes(field_value: object, parse: Callable[[str], Any]) -> tuple[Any, ...]:
    out = []
    for code in str(field_value or "").split(","):
        if code.strip():
            try:
                out.append(parse(code.strip()))
            except ValueError:
                continue
    return tuple(out)


def _splits(dialogues: Sequence[LabelledDialogue]) -> list[int]:
    """The shared cross-validation fold of each dialogue (-1 when the set is too small to fold)."""
    from guardian.corpora.folds import mentalmanip_folds

    try:
        folds = mentalmanip_folds(dialogues)
    except ValueError:
        return [-1] * len(dialogues)
    split = [-1] * len(dialogues)
    for fold, (_, test) in enumerate(folds):
        for i in test:
            split[int(i)] = fold
    return split


class ExampleStore:
    """Build and query the example collection (embedded or on a Chroma server)."""

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        server_url: str | None = None,
        collection: str = "mentalmanip",
        embedding: MiniLMEmbeddingFunction | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else locations.data_dir() / "chroma"
        self.server_url = server_url
        self.collection_name = collection
        self._embedding = embedding
        self._client: Any = None

    @classmethod
    def from_settings(cls) -> ExampleStore:
        from guardian.config import settings

        s = settings().store
        embedding = MiniLMEmbeddingFunction(s.embedding_model) if s.embedding_model else None
        return cls(path=s.path, server_url=s.server_url, collection=s.collection, embedding=embedding)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def embedding(self) -> MiniLMEmbeddingFunction:
        if self._embedding is None:
            self._embedding = MiniLMEmbeddingFunction()
        return self._embedding

    @property
    def where(self) -> str:
        return self.server_url or str(self.path)

    def _new_client(self) -> Any:
        apply_process_defaults()  # chromadb's telemetry, onnxruntime's: off before they load
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        chroma_settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
        if self.server_url:
            url = urlparse(self.server_url)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ConfigError(f"store.server_url {self.server_url!r} is not an http(s) URL")
            return chromadb.HttpClient(
                host=url.hostname,
                port=url.port or (443 if url.scheme == "https" else 8000),
                ssl=url.scheme == "https",
                settings=chroma_settings,
            )
        self.path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(self.path), settings=chroma_settings)

    def _client_or_recover(self) -> tuple[Any, str | None]:
        """A working client; a persistent store Chroma cannot open is moved aside and recreated."""
        if self._client is not None:
            return self._client, None
        try:
            client = self._new_client()
            client.list_collections()
        except GuardianError:
            raise
        except Exception as exc:
            if self.server_url:
                raise GuardianError(f"cannot reach the Chroma server at {self.server_url}: {exc}") from exc
            moved = self._move_aside()
            client = self._new_client()
            self._client = client
            return client, f"the store at {self.path} could not be read ({type(exc).__name__}); moved to {moved}"
        self._client = client
        return client, None

    def _move_aside(self) -> Path:
        from chromadb.api.client import SharedSystemClient

        SharedSystemClient.clear_system_cache()
        target = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 1
        while target.exists():
            target = target.with_name(f"{target.name}-{n}")
            n += 1
        shutil.move(str(self.path), str(target))
        return target

    def _expected_metadata(self) -> dict[str, Any]:
        return {"embedding_model": self.embedding.model_id, "guardian_store_version": STORE_VERSION}

    def _collection(self, *, create: bool) -> tuple[Any | None, str | None]:
        """The collection (None if absent and not creating) and why it had to be rebuilt, if it did."""
        client, recovered = self._client_or_recover()
        reason = recovered
        existing = {c.name if hasattr(c, "name") else str(c) for c in client.list_collections()}
        if self.collection_name in existing:
            try:
                col = client.get_collection(self.collection_name, embedding_function=self.embedding)
                meta = col.metadata or {}
                expected = self._expected_metadata()
                mismatch = [k for k, v in expected.items() if meta.get(k) != v]
                col.count()
            except Exception as exc:
                mismatch = [f"unreadable collection ({type(exc).__name__})"]
                col = None
            if not mismatch:
                return col, reason
            if not create:
                return None, f"the example store was built with another embedding model ({', '.join(mismatch)})"
            client.delete_collection(self.collection_name)
            reason = reason or f"the store was built with another embedding model ({meta_desc(mismatch)})"
        elif not create:
            return None, reason
        col = client.create_collection(
            self.collection_name,
            embedding_function=self.embedding,
            metadata=self._expected_metadata(),
            configuration={"hnsw": {"space": "cosine"}},
        )
        return col, reason

    # -- building ---------------------------------------------------------------------------

    def build(
        self,
        dialogues: Sequence[LabelledDialogue],
        *,
        source: str = "mentalmanip_con",
        rebuild: bool = False,
        progress: Progress | None = None,
    ) -> BuildReport:
        """Index `dialogues` (ids = dataset ids): only missing ones are embedded; stale ones removed."""
        started = time.perf_counter()
        reason: str | None = None
        if rebuild:
            client, reason = self._client_or_recover()
            if any(getattr(c, "name", c) == self.collection_name for c in client.list_collections()):
                client.delete_collection(self.collection_name)
            reason = reason or "--rebuild"
        col, why = self._collection(create=True)
        assert col is not None
        reason = reason or why
        wanted = {d.id: d for d in dialogues}
        if len(wanted) != len(dialogues):
            raise GuardianError("the labelled data has duplicate dialogue ids; ids must be unique")
        have = set(col.get(include=[])["ids"])
        stale = sorted(have - wanted.keys())
        if stale:
            col.delete(ids=stale)
        splits = dict(zip((d.id for d in dialogues), _splits(dialogues), strict=True))
        todo = [d for d in dialogues if d.id not in have]
        total = len(todo)
        if progress:
            progress(0, total)
        batch = max(1, min(256, int(self._client.get_max_batch_size())))
        done = 0
        for i in range(0, total, batch):
            chunk = todo[i : i + batch]
            texts = [d.conversation.as_text() for d in chunk]
            vectors = self.embedding(texts)
            col.upsert(
                ids=[d.id for d in chunk],
                documents=texts,
                embeddings=vectors,
                metadatas=[_metadata(d, source=source, split=splits[d.id]) for d in chunk],
            )
            done += len(chunk)
            if progress:
                progress(done, total)
        return BuildReport(
            total=int(col.count()),
            added=total,
            removed=len(stale),
            seconds=time.perf_counter() - started,
            rebuilt=reason,
        )

    def count(self) -> int:
        col, _ = self._collection(create=False)
        return 0 if col is None else int(col.count())

    def ready(self) -> tuple[bool, str | None]:
        """Whether the store can be queried, and if not, why (missing, other model, unreadable)."""
        try:
            col, why = self._collection(create=False)
        except GuardianError as exc:
            return False, str(exc)
        if col is None or col.count() == 0:
            return False, why or f"the example store at {self.where} is empty; run `guardian index`"
        return True, None

    # -- querying ---------------------------------------------------------------------------

    def query(
        self,
        window: Conversation,
        *,
        manipulative: int = 2,
        other: int = 1,
        technique: Technique | None = None,
        exclude_ids: Sequence[str] = (),
        exclude_split: int | None = None,
    ) -> list[Example]:
        """The nearest labelled examples to `window`, balanced by label, nearest first per label.

        The window's own dialogue is never returned: its id and any stored document
        with the same text are excluded (so evaluating on stored data cannot leak
        the answer). `exclude_split` drops a whole cross-validation fold.
        """
        col, _ = self._collection(create=False)
        if col is None or not window.turns:
            return []
        text = window.as_text()
        vector = self.embedding([text])
        banned_ids = {window.id, *exclude_ids}
        banned_text = normalize_quote(text)
        out: list[Example] = []
        for label, k in ((1, manipulative), (0, other)):
            if k <= 0:
                continue
            clauses: list[dict[str, Any]] = [{"label": label}]
            if technique is not None and label == 1:
                clauses.append({_flag(technique): True})
            if exclude_split is not None:
                clauses.append({"split": {"$ne": exclude_split}})
            where: dict[str, Any] = clauses[0] if len(clauses) == 1 else {"$and": clauses}
            res = col.query(
                query_embeddings=vector,
                n_results=k + len(banned_ids) + 1,
                where=where,
                include=["documents", "metadatas", "distances"],
            )
            ids, docs = res["ids"][0], (res["documents"] or [[]])[0]
            metas, dists = (res["metadatas"] or [[]])[0], (res["distances"] or [[]])[0]
            picked = 0
            for id_, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
                if id_ in banned_ids or normalize_quote(doc or "") == banned_text:
                    continue
                out.append(
                    Example(
                        id=id_,
                        text=doc or "",
                        manipulative=bool(meta.get("label")),
                        techniques=_codes(meta.get("techniques"), Technique.parse),
                        vulnerabilities=_codes(meta.get("vulnerabilities"), Vulnerability.parse),
                        distance=float(dist),
                    )
                )
                picked += 1
                if picked >= k:
                    break
        return out


def meta_desc(mismatch: list[str]) -> str:
    return ", ".join(mismatch)
