"""Optional signatures on run records, so that a model and its checksum cannot be swapped together.

A run's manifest lists the sha256 of every file the run wrote, and ``predict`` checks a model's
files against it before loading them. Those checksums sit next to the files they protect,
though: whoever can write a run folder can replace a model and update its checksum. With a
secret key in the environment, the runner signs the final manifest of a succeeded run
(HMAC-SHA256 over its exact bytes) into ``manifest.json.sig`` beside it, and ``predict`` and
``load_model`` refuse a run that is unsigned or whose signature does not match: a writer
without the key cannot make one that does. Without a key nothing is signed or checked.

The key is ``PIPELINE_SIGNING_KEY`` (the key itself) or ``PIPELINE_SIGNING_KEY_FILE`` (a file
holding it: systemd credentials, Kubernetes secrets), at least 16 bytes. Setting both, or a key
that is empty, too short or unreadable, is a usage error (exit 2): a job that meant to sign or
check must never quietly run without.

The signature is a sidecar file rather than a manifest field so that it covers the manifest
byte for byte, with no canonical form to agree on; ``sign_file``/``verify_file`` sign any file
this way (a cache record, for instance).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.core.errors import DataError, StorageError, UsageError
from pipeline.core.settings import Settings, current_settings, register_check
from pipeline.runs.layout import MANIFEST, MODEL_DESCRIPTION
from pipeline.runs.store import atomic_write_text, json_text, sha256_file

KEY_ENV = Settings.variable("signing_key")
KEY_FILE_ENV = Settings.variable("signing_key_file")
SIGNATURE_SUFFIX = ".sig"
ALGORITHM = "hmac-sha256"
MIN_KEY_BYTES = 16
_DOMAIN = b"pipeline signature v1\0"        # a signature of this tool, over a file of this name

__all__ = [
    "KEY_ENV", "KEY_FILE_ENV", "check_signing_key", "sign_file", "sign_run", "signature_path", "signature_problem",
    "signature_text", "signing_key", "verify_file", "verify_model_folder", "verify_run",
]


# ---------------------------------------------------------------------------- the key
def signing_key(settings: Settings | None = None) -> bytes | None:
    """The key of ``settings`` (default: this process's), or None when neither variable is set."""
    settings = current_settings() if settings is None else settings
    value, file = settings.signing_key, settings.signing_key_file
    if value is None and file is None:
        return None
    if value is not None and file is not None:
        raise UsageError(f"both {KEY_ENV} and {KEY_FILE_ENV} are set; set one of them")
    if file is not None:
        source = f"{KEY_FILE_ENV} ({file})"
        try:
            key = Path(file).read_bytes().strip() if file else b""
        except OSError as exc:
            raise UsageError(f"{source}: cannot read the signing key ({exc.strerror or exc})") from None
    else:
        source, key = KEY_ENV, str(value).strip().encode("utf-8")
    if len(key) < MIN_KEY_BYTES:
        raise UsageError(f"{source}: the signing key is {'empty' if not key else f'{len(key)} bytes'}; use at least "
                         f"{MIN_KEY_BYTES} random bytes (for example the output of: openssl rand -hex 32), or unset it "
                         "to run without signatures")
    return key


register_check("signing_key", "signing_key_file", check=signing_key)


def check_signing_key() -> None:
    """Fail now (exit 2) if a key is set but unusable, rather than after a night's training."""
    signing_key()


def _key_id(key: bytes) -> str:
    """Names the key without revealing it: tells "another key" from "changed after signing"."""
    return hmac.new(key, b"pipeline key id", hashlib.sha256).hexdigest()[:16]


def _mac(key: bytes, name: str, data: bytes) -> str:
    return hmac.new(key, _DOMAIN + name.encode("utf-8") + b"\0" + data, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------------- any file
def signature_path(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIGNATURE_SUFFIX)


def sign_file(path: str | os.PathLike[str], key: bytes | None = None) -> Path | None:
    """Write ``path``'s signature beside it (atomically); None, and nothing written, without a key."""
    key = signing_key() if key is None else key
    if key is None:
        return None
    path = Path(path)
    target = signature_path(path)
    try:
        atomic_write_text(target, signature_text(path.name, path.read_bytes(), key))
    except OSError as exc:
        raise StorageError(f"cannot sign {path}: {exc.strerror or exc}") from exc
    return target


def verify_file(path: str | os.PathLike[str], key: bytes | None = None, *, what: str | None = None) -> bytes | None:
    """The bytes of ``path`` once its signature matches; None without a key (nothing checked).

    Callers parse the returned bytes rather than read the file again, so what they use is what
    was verified. ``what`` names the file in messages.
    """
    key = signing_key() if key is None else key
    if key is None:
        return None
    path = Path(path)
    what = what or str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{what}: cannot read {path} ({exc.strerror or exc})") from None
    signature = _read_signature(signature_path(path), what)
    if not _matches(signature["signature"], _mac(key, path.name, data)):
        why = ("it was signed with another key" if signature.get("key_id") != _key_id(key)
               else "it was changed after it was signed")
        raise DataError(f"{what}: the signature in {signature_path(path)} does not match ({why}); it was not used")
    return data


def _read_signature(path: Path, what: str) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{what} is not signed (no {path.name}); {KEY_ENV} or {KEY_FILE_ENV} is set, so only runs "
                        "signed with that key are used: run the pipeline again with the key set") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DataError(f"{what}: {path} is not a signature file ({exc})") from None
    if not isinstance(record, dict) or record.get("algorithm") != ALGORITHM or not isinstance(record.get("signature"), str):
        raise DataError(f"{what}: {path} is not an {ALGORITHM} signature file")
    return record


def _matches(signature: str, expected: str) -> bool:
    """Constant-time comparison; any string read from a signature file compares (lone surrogates too)."""
    return hmac.compare_digest(signature.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


def signature_text(name: str, data: bytes, key: bytes) -> str:
    """The signature file of ``data`` (the bytes of a file called ``name``): for a caller that
    writes it itself, such as the stage cache inside an entry's temporary folder."""
    record = {"algorithm": ALGORITHM, "key_id": _key_id(key), "file": name, "signature": _mac(key, name, data)}
    return json_text(record) + "\n"


def signature_problem(path: str | os.PathLike[str], data: bytes, key: bytes) -> str | None:
    """Why ``data`` (``path``'s bytes, as the caller read them) does not carry a signature made with
    ``key``, or None when it does. Never raises: for callers that recover from a bad signature
    (the stage cache recomputes) rather than stop, and that parse the very bytes checked."""
    path = Path(path)
    sig = signature_path(path)
    try:
        record = json.loads(sig.read_bytes())
    except FileNotFoundError:
        return f"{path.name} is not signed (no {sig.name})"
    except (OSError, ValueError, RecursionError) as exc:      # UnicodeDecodeError is a ValueError
        return f"{sig.name} is not a signature file ({type(exc).__name__})"
    if not isinstance(record, dict) or record.get("algorithm") != ALGORITHM or not isinstance(record.get("signature"), str):
        return f"{sig.name} is not an {ALGORITHM} signature file"
    if _matches(record["signature"], _mac(key, path.name, data)):
        return None
    why = "it was signed with another key" if record.get("key_id") != _key_id(key) else "it was changed after it was signed"
    return f"{path.name} does not match its signature ({why})"


# ---------------------------------------------------------------------------- runs and models
def sign_run(run_dir: str | os.PathLike[str]) -> Path | None:
    """Sign a finished run's manifest (the runner calls this); no-op without a key."""
    return sign_file(Path(run_dir) / MANIFEST)


def verify_run(run_dir: str | os.PathLike[str], key: bytes | None = None) -> dict[str, Any] | None:
    """The run's manifest as verified JSON; None without a key. DataError (exit 3) when the run
    is unsigned, its signature does not match, or the signed bytes are not a manifest."""
    run_dir = Path(run_dir)
    data = verify_file(run_dir / MANIFEST, key, what=f"run {run_dir.name}")
    if data is None:
        return None
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as exc:      # RecursionError: nested deeper than json can read
        raise DataError(f"run {run_dir.name}: the signed manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise DataError(f"run {run_dir.name}: the signed manifest is not a run record")
    return manifest


def verify_model_folder(folder: str | os.PathLike[str]) -> None:
    """With a key set: ``folder`` must lie in a run whose manifest is signed, and every file in
    it must be listed there with a matching sha256 (nothing added, nothing changed). No-op
    without a key. ``load_model`` calls this before reading anything of the folder."""
    key = signing_key()
    if key is None:
        return
    folder = Path(folder).resolve()
    run_dir = next((p for p in folder.parents if (p / MANIFEST).is_file()), None)
    if run_dir is None:
        raise DataError(f"{folder} is not inside a run folder, so its signature cannot be checked; {KEY_ENV} or "
                        f"{KEY_FILE_ENV} is set, so only models of signed runs load")
    manifest = verify_run(run_dir, key) or {}
    artifacts = manifest.get("artifacts")
    if not isinstance(artifacts, dict):
        raise DataError(f"run {run_dir.name}: the signed manifest lists no artifacts")
    _verify_folder_files(run_dir, folder.relative_to(run_dir).as_posix(), artifacts)


def _verify_folder_files(run_dir: Path, folder: str, artifacts: Mapping[str, Any]) -> None:
    prefix = folder.rstrip("/") + "/"
    listed = {k: v for k, v in artifacts.items() if isinstance(k, str) and k.startswith(prefix)}
    for required in (MODEL_DESCRIPTION, "workflow.json"):
        if prefix + required not in listed:
            raise DataError(f"{run_dir / prefix / required} is not in run {run_dir.name}'s signed manifest")
    present = {p.relative_to(run_dir).as_posix() for p in (run_dir / folder).rglob("*") if p.is_file()}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise DataError(f"{run_dir / folder}: file(s) {unlisted} are not in run {run_dir.name}'s signed manifest; "
                        "the model was not loaded")
    for name, digest in sorted(listed.items()):
        path = run_dir / name
        if not path.is_file():
            raise DataError(f"model artifact {path} is missing (run {run_dir.name}'s signed manifest lists it)")
        if sha256_file(path) != digest:
            raise DataError(f"model artifact {path} does not match its sha256 in run {run_dir.name}'s signed "
                            "manifest; it was not loaded")
