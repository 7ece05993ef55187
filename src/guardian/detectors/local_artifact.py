"""Storing, finding, checking and (re)building the local model's artifact.

An artifact is a directory of three plain files, no pickle:

* ``manifest.json``: format version, training data hash, seed, package versions,
  thresholds, cross-validated metrics and the SHA-256 of the other two files;
* ``featurizer.json``: the TF-IDF vocabularies and settings;
* ``weights.npz``: idf vectors and head weights.

Where the detector looks, in order: ``[local] artifact_dir`` in the settings, the
user cache (``<cache>/local_model``, what `guardian train` writes by default), then
the artifact shipped inside the package (``guardian/resources/local_model``). A
missing or corrupt artifact is reported in one sentence and rebuilt from the
bundled data into the cache, so a fresh machine still reaches a verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from guardian import locations
from guardian.detectors.local_encoder import MODEL_NAME
from guardian.detectors.local_features import TextFeaturizer
from guardian.detectors.local_train import (
    TECHNIQUES,
    VULNERABILITIES,
    HeadSet,
    LinearHeads,
    Progress,
    Stacker,
    TrainConfig,
    TrainedModel,
    train,
)
from guardian.errors import ModelUnavailable

FORMAT_VERSION = 3
MANIFEST = "manifest.json"
FEATURIZER = "featurizer.json"
WEIGHTS = "weights.npz"
_PACKAGES = ("scikit-learn", "numpy", "scipy", "guardian")


class ArtifactError(Exception):
    """An artifact that cannot be used as it is (missing file, bad hash, wrong format)."""


class StaleArtifact(ArtifactError):
    """An intact artifact written by another version of guardian (older format or label set)."""


def cache_artifact_dir() -> Path:
    return locations.cache_dir() / "local_model"


def shipped_artifact_dir() -> Path:
    return locations.package_dir() / "resources" / "local_model"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def save(model: TrainedModel, directory: Path, *, extra_manifest: dict[str, Any] | None = None) -> Path:
    """Write `model` to `directory` (created; files replaced atomically one by one)."""
    if model.extra_dim:
        raise ValueError("a model trained with extra features is for measurement only and cannot be saved")
    directory.mkdir(parents=True, exist_ok=True)
    meta, idf = model.featurizer.export()
    arrays: dict[str, np.ndarray] = {
        **idf,
        **_heads_arrays("tfidf", model.tfidf),
        "binary_stack_w": model.binary_stacker.weights,
        "binary_stack_b": model.binary_stacker.bias,
        "technique_stack_w": model.technique_stacker.weights,
        "technique_stack_b": model.technique_stacker.bias,
        "vulnerability_stack_w": model.vulnerability_stacker.weights,
        "vulnerability_stack_b": model.vulnerability_stacker.bias,
    }
    if model.embedding is not None:
        arrays.update(_heads_arrays("embedding", model.embedding))
    featurizer_path = directory / FEATURIZER
    weights_path = directory / WEIGHTS
    _atomic_write(featurizer_path, json.dumps(meta, ensure_ascii=False).encode("utf-8"))
    tmp = weights_path.with_name(f"weights.{os.getpid()}.tmp.npz")
    np.savez_compressed(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(weights_path)
    manifest = {
        "format_version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "threshold": model.threshold,
        "technique_ratio": model.technique_ratio,
        "vulnerability_ratio": model.vulnerability_ratio,
        "embeddings": model.embedding is not None,
        "encoder": MODEL_NAME if model.embedding is not None else None,
        "techniques": [t.value for t in TECHNIQUES],
        "vulnerabilities": [v.value for v in VULNERABILITIES],
        "metrics": model.metrics,
        "versions": _versions(),
        "files": {FEATURIZER: _sha256(featurizer_path), WEIGHTS: _sha256(weights_path)},
        **(extra_manifest or {}),
    }
    _atomic_write(directory / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    return directory


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        raise ArtifactError(f"no {MANIFEST} in {directory}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path} is not an artifact manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise StaleArtifact(f"{directory} was written by another guardian version (format {manifest.get('format_version')})")
    return manifest


def load(directory: Path) -> TrainedModel:
    """Load and verify an artifact; any defect raises ArtifactError with the reason."""
    manifest = read_manifest(directory)
    files = manifest.get("files", {})
    for name in (FEATURIZER, WEIGHTS):
        path = directory / name
        if not path.is_file():
            raise ArtifactError(f"{path} is missing")
        if files.get(name) != _sha256(path):
            raise ArtifactError(f"{path} does not match its manifest checksum (corrupt or edited)")
    if manifest.get("techniques") != [t.value for t in TECHNIQUES] or manifest.get("vulnerabilities") != [
        v.value for v in VULNERABILITIES
    ]:
        raise StaleArtifact(f"{directory} was trained with a different label set")
    try:
        meta = json.loads((directory / FEATURIZER).read_text(encoding="utf-8"))
        with np.load(directory / WEIGHTS, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        featurizer = TextFeaturizer.restore(meta, arrays)
        model = TrainedModel(
            featurizer=featurizer,
            tfidf=_heads_from("tfidf", arrays),
            embedding=_heads_from("embedding", arrays) if manifest.get("embeddings") else None,
            binary_stacker=Stacker(arrays["binary_stack_w"], arrays["binary_stack_b"]),
            technique_stacker=Stacker(arrays["technique_stack_w"], arrays["technique_stack_b"]),
            vulnerability_stacker=Stacker(arrays["vulnerability_stack_w"], arrays["vulnerability_stack_b"]),
            threshold=float(manifest["threshold"]),
            technique_ratio=float(manifest["technique_ratio"]),
            vulnerability_ratio=float(manifest["vulnerability_ratio"]),
            metrics=dict(manifest.get("metrics", {})),
        )
    except (KeyError, ValueError, TypeError, OSError, IndexError) as exc:
        raise ArtifactError(f"{directory} cannot be read ({type(exc).__name__}: {exc})") from None
    blocks = 2 if model.embedding is not None else 1
    if model.binary.coef.shape[1] != featurizer.n_features or model.binary_stacker.weights.shape[1] != blocks:
        raise ArtifactError(f"{directory} has weights that do not fit its vocabulary")
    return model


def _heads_arrays(prefix: str, heads: HeadSet) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in ("binary", "techniques", "vulnerabilities"):
        head: LinearHeads = getattr(heads, name)
        out[f"{prefix}_{name}_coef"] = head.coef.astype(np.float32)
        out[f"{prefix}_{name}_intercept"] = np.asarray(head.intercept, dtype=np.float64)
    return out


def _heads_from(prefix: str, arrays: dict[str, np.ndarray]) -> HeadSet:
    def head(name: str) -> LinearHeads:
        return LinearHeads(arrays[f"{prefix}_{name}_coef"], arrays[f"{prefix}_{name}_intercept"])

    return HeadSet(binary=head("binary"), techniques=head("techniques"), vulnerabilities=head("vulnerabilities"))


@dataclass(frozen=True, slots=True)
class Loaded:
    model: TrainedModel
    directory: Path
    rebuilt: bool = False


def build(
    *,
    data: Sequence[Path] | None = None,
    out: Path | None = None,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    label_data: Sequence[Path] | None = None,
) -> Path:
    """Train on MentalManip CSVs and save the artifact.

    `data` files are merged by dialogue id (first occurrence wins) and train every
    head. `label_data` dialogues not already in `data` train the technique and
    vulnerability heads only. Default (no `data`): the consensus set
    ``mentalmanip_con.csv`` for everything and the maj-only dialogues of
    ``mentalmanip_maj.csv`` for the label heads, the split cross-validation
    preferred (maj-only dialogues make the binary decision worse on consensus
    labels but help the labels; docs/model-card.md).
    """
    from guardian.eval.datasets import file_sha256, load_mentalmanip, mentalmanip_path

    if data:
        paths, label_paths = list(data), list(label_data or [])
    else:
        paths = [mentalmanip_path("con")]
        label_paths = list(label_data) if label_data is not None else [mentalmanip_path("maj")]
    missing = [p for p in (*paths, *label_paths) if not p.is_file()]
    if missing:
        raise ModelUnavailable(
            f"cannot build the local model: training data {missing[0]} is missing "
            "(run from a source checkout, or set GUARDIAN_TRAINING_DATA to the data/ folder)"
        )
    dialogues = merge_training_data([load_mentalmanip(p) for p in paths])
    known = {d.id for d in dialogues}
    label_only = [d for d in merge_training_data([load_mentalmanip(p) for p in label_paths]) if d.id not in known]
    config = config or TrainConfig()
    model = train(dialogues, config=config, progress=progress, label_only=label_only)
    out = out or cache_artifact_dir()
    all_paths = [*paths, *label_paths]
    return save(
        model,
        out,
        extra_manifest={
            "seed": config.seed,
            "config": config.as_dict(),
            "data": {p.name: file_sha256(p) for p in paths},
            "label_only_data": {p.name: file_sha256(p) for p in label_paths},
            "data_sha256": file_sha256(*all_paths),
            "n_dialogues": len(dialogues),
            "n_label_only_dialogues": len(label_only),
        },
    )


def merge_training_data(sets: Sequence[Sequence[Any]]) -> list[Any]:
    """Concatenate dialogue lists keeping the first occurrence of an id (con before maj)."""
    seen: set[str] = set()
    out = []
    for dialogues in sets:
        for d in dialogues:
            if d.id not in seen:
                seen.add(d.id)
                out.append(d)
    return out


def candidates() -> list[Path]:
    from guardian.config import settings

    configured = settings().local.artifact_dir
    if configured is not None:
        return [Path(configured).expanduser()]
    return [cache_artifact_dir(), shipped_artifact_dir()]


def load_or_build(*, progress: Progress | None = None) -> Loaded:
    """The first usable artifact; a corrupt one is reported and rebuilt, none at all is built.

    A stale cache (an intact artifact from another guardian version) is skipped with a
    message when a later candidate (the shipped model) is usable, rather than retrained
    behind the user's back.
    """
    found = [d for d in candidates() if d.is_dir() and any(d.iterdir())]
    for n, directory in enumerate(found):
        try:
            return Loaded(load(directory), directory)
        except StaleArtifact as exc:
            if n + 1 < len(found):
                print(f"guardian: {exc}; using {found[n + 1]} (run `guardian train` to refresh it)", file=sys.stderr)
                continue
            return _rebuild(str(exc), _writable(directory), progress)
        except ArtifactError as exc:
            return _rebuild(str(exc), _writable(directory), progress)
    return _rebuild("no local model artifact found", candidates()[0], progress)


def _writable(directory: Path) -> Path:
    """Never write into the installed package: a broken shipped artifact is rebuilt in the cache."""
    return cache_artifact_dir() if directory == shipped_artifact_dir() else directory


def _rebuild(reason: str, target: Path, progress: Progress | None) -> Loaded:
    print(
        f"guardian: {reason}; rebuilding the local model into {target} (about a minute)...",
        file=sys.stderr,
        flush=True,
    )
    directory = build(out=target, progress=progress)
    return Loaded(load(directory), directory, rebuilt=True)
