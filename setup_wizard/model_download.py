"""Model download from the Hugging Face Hub: resumable, with a progress bar, verified by SHA-256.

`huggingface_hub` resolves the file (honouring `HF_ENDPOINT`, revisions and tokens) and reports
its size and SHA-256 (the LFS etag). The transfer itself is ours so that it resumes across runs:
bytes go to `<file>.part` (kept when interrupted, continued with an HTTP Range request next
time), the hash is computed while writing, and only a complete, verified file is renamed to
its final name. A full disk, a bad checksum or a lost connection never leaves a file that looks
done. Verified files are recorded (size, mtime, hash) so a rerun need not hash 16 GB again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import httpx

MODEL_REPO = "unsloth/Qwen3.8-27B-GGUF"
MODEL_FILE = "Qwen3.8-27B-Q4_K_M.gguf"
KEYRING_SERVICE = "openjet"
KEYRING_HF_USER = "huggingface"
VERIFIED_RECORD = ".openjet-verified.json"
CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

ProgressHook = Callable[[int, int], None]  # (bytes done, bytes total)


class DownloadError(RuntimeError):
    """The model could not be fetched or verified; the message says why and what to do."""


class DiskFullError(DownloadError):
    pass


class ChecksumError(DownloadError):
    pass


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    filename: str
    url: str  # where the bytes are fetched from (after the hub's own redirects)
    size: int
    sha256: str | None  # None when the hub gives no hash (then only the size is checked)
    commit: str | None


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_token() -> str | None:
    """An HF token from the environment / huggingface-cli login, else from the keyring."""
    from huggingface_hub import get_token

    token = get_token()
    if token:
        return token
    try:
        import keyring

        return keyring.get_password(KEYRING_SERVICE, KEYRING_HF_USER)
    except Exception:  # no keyring backend on this machine: simply no token
        return None


def remote_file(
    repo: str = MODEL_REPO, filename: str = MODEL_FILE, revision: str = "main"
) -> RemoteFile:
    """Ask the hub for the file's size, hash and download address."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    endpoint = hub_endpoint()
    url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=hub_token(), endpoint=endpoint)
    except (GatedRepoError, RepositoryNotFoundError) as exc:
        raise DownloadError(
            f"{repo} is not accessible ({type(exc).__name__}); if it needs a token, set HF_TOKEN "
            "or run `hf auth login`"
        ) from exc
    except HfHubHTTPError as exc:
        raise DownloadError(f"the hub refused {url}: {exc}") from exc
    except (httpx.HTTPError, OSError) as exc:
        raise DownloadError(f"cannot reach {endpoint}: {exc}") from exc
    if meta.size is None:
        raise DownloadError(f"the hub did not report the size of {filename}")
    etag = (meta.etag or "").lower()
    sha = etag if _SHA256.match(etag) else None
    return RemoteFile(repo, filename, meta.location, int(meta.size), sha, meta.commit_hash)


def part_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def bytes_still_needed(remote: RemoteFile, target: Path) -> int:
    part = part_path(target)
    have = part.stat().st_size if part.is_file() else 0
    return max(0, remote.size - have)


def _auth_headers(url: str) -> dict[str, str]:
    # The token goes only to the hub itself, never to a CDN it redirects to.
    token = hub_token()
    if token and urlparse(url).netloc == urlparse(hub_endpoint()).netloc:
        return {"authorization": f"Bearer {token}"}
    return {}


def _hash_existing(part: Path) -> tuple[int, hashlib._Hash]:
    digest = hashlib.sha256()
    if not part.is_file():
        return 0, digest
    with part.open("rb") as existing:
        while chunk := existing.read(CHUNK):
            digest.update(chunk)
    return part.stat().st_size, digest


def _write(out: BinaryIO, chunk: bytes, target: Path) -> None:
    try:
        out.write(chunk)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"the disk is full while writing {target.name}: free some space and run setup "
                f"again (the partial download {part_path(target).name} is kept and resumed)"
            ) from exc
        raise DownloadError(f"cannot write {part_path(target)}: {exc}") from exc


def _transfer(remote: RemoteFile, target: Path, on_progress: ProgressHook | None) -> str:
    """One attempt: continue `.part` from its size. Returns the hex SHA-256 of the whole file."""
    part = part_path(target)
    done, digest = _hash_existing(part)
    headers = _auth_headers(remote.url)
    if done:
        headers["range"] = f"bytes={done}-"
    with httpx.stream("GET", remote.url, headers=headers, timeout=60, follow_redirects=True) as r:
        if r.status_code == 416 and done == remote.size:
            return digest.hexdigest()
        if r.status_code not in (200, 206):
            raise DownloadError(f"GET {remote.url} answered HTTP {r.status_code}")
        if r.status_code == 200 and done:  # the server ignored the range: start over
            done, digest = 0, hashlib.sha256()
        # Unbuffered: a full disk shows up at the write that hit it, not at a later flush.
        with part.open("ab" if done else "wb", buffering=0) as out:
            for chunk in r.iter_bytes():  # as received: a dropped link loses no bytes
                _write(out, chunk, target)
                digest.update(chunk)
                done += len(chunk)
                if on_progress:
                    on_progress(done, remote.size)
            os.fsync(out.fileno())  # durable before it can be renamed to its final name
    return digest.hexdigest()


def download(
    remote: RemoteFile, target: Path, on_progress: ProgressHook | None = None, attempts: int = 4
) -> Path:
    """Fetch `remote` to `target` (resuming any `.part`), verify size and hash, then rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(target)
    last_error: Exception | None = None
    for _ in range(attempts):
        try:
            sha = _transfer(remote, target, on_progress)
            break
        except httpx.TransportError as exc:  # dropped connection, timeout: resume from the part
            last_error = exc
    else:
        raise DownloadError(
            f"the download of {remote.filename} kept failing ({last_error}); run setup again to "
            "resume it"
        )
    size = part.stat().st_size
    if size != remote.size or (remote.sha256 and sha != remote.sha256):
        if not part.is_symlink():
            part.unlink(missing_ok=True)  # our own partial file, and it is wrong: start over
        got = f"{size} bytes, sha256 {sha}"
        want = f"{remote.size} bytes, sha256 {remote.sha256 or '(not given)'}"
        raise ChecksumError(
            f"{remote.filename} does not match the hub ({got}; expected {want}); the bad copy "
            "was removed, run setup again"
        )
    os.replace(part, target)
    record_verified(target, sha)
    return target


def sha256_file(path: Path, on_progress: ProgressHook | None = None) -> str:
    digest = hashlib.sha256()
    total, done = path.stat().st_size, 0
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if on_progress:
                on_progress(done, total)
    return digest.hexdigest()


def _records(folder: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads((folder / VERIFIED_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_verified(path: Path, sha256: str) -> None:
    records = _records(path.parent)
    stat = path.stat()
    records[path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}
    temporary = path.parent / (VERIFIED_RECORD + ".tmp")
    temporary.write_text(json.dumps(records, indent=2), encoding="utf-8")
    os.replace(temporary, path.parent / VERIFIED_RECORD)


def recorded_sha256(path: Path) -> str | None:
    """The hash recorded when `path` was verified, if the file has not changed since."""
    entry = _records(path.parent).get(path.name)
    if not entry or not path.is_file():
        return None
    stat = path.stat()
    if entry.get("size") != stat.st_size or entry.get("mtime_ns") != stat.st_mtime_ns:
        return None
    sha = entry.get("sha256")
    return sha if isinstance(sha, str) else None
