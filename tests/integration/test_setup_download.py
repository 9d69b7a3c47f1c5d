"""Model download against a local hub on loopback (HF_ENDPOINT): a whole download, resume after
an interrupted transfer (in the same run and in the next one), a checksum mismatch, a full disk,
a token-protected repository, and a file setup did not create."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from rich.console import Console

from setup_wizard import model_download as dl
from setup_wizard.model_step import locate_model, obtain_model
from tests.integration.conftest import LocalHub


def quiet() -> Console:
    return Console(quiet=True)


def test_remote_metadata_comes_from_the_hub(hub: LocalHub, model_bytes: bytes) -> None:
    remote = dl.remote_file()
    assert remote.size == len(model_bytes)
    assert remote.sha256 == hashlib.sha256(model_bytes).hexdigest()
    assert remote.commit == LocalHub.COMMIT and remote.url.startswith(hub.url)


def test_whole_download_is_verified_and_recorded(
    hub: LocalHub, tmp_path: Path, model_bytes: bytes
) -> None:
    seen: list[tuple[int, int]] = []
    target = dl.download(
        dl.remote_file(), tmp_path / dl.MODEL_FILE, lambda d, t: seen.append((d, t))
    )
    assert target.read_bytes() == model_bytes
    assert not dl.part_path(target).exists()
    assert dl.recorded_sha256(target) == hashlib.sha256(model_bytes).hexdigest()
    assert seen[-1] == (len(model_bytes), len(model_bytes))


def test_interrupted_transfer_resumes_with_a_range_request(
    hub: LocalHub, tmp_path: Path, model_bytes: bytes
) -> None:
    hub.cut_after = len(model_bytes) // 3
    target = dl.download(dl.remote_file(), tmp_path / dl.MODEL_FILE)
    assert target.read_bytes() == model_bytes
    assert hub.ranges() == [None, f"bytes={len(model_bytes) // 3}-"]


def test_download_resumes_in_the_next_run(
    hub: LocalHub, tmp_path: Path, model_bytes: bytes
) -> None:
    hub.cut_after = len(model_bytes) // 2
    target = tmp_path / dl.MODEL_FILE
    with pytest.raises(dl.DownloadError, match="run setup again to resume"):
        dl.download(dl.remote_file(), target, attempts=1)
    assert not target.exists()  # nothing partial claimed as done
    assert dl.part_path(target).stat().st_size == len(model_bytes) // 2
    remote = dl.remote_file()
    assert dl.bytes_still_needed(remote, target) == len(model_bytes) - len(model_bytes) // 2
    dl.download(remote, target)
    assert target.read_bytes() == model_bytes
    assert hub.ranges()[-1] == f"bytes={len(model_bytes) // 2}-"


def test_checksum_mismatch_leaves_nothing_that_looks_done(hub: LocalHub, tmp_path: Path) -> None:
    hub.advertised_sha[f"{dl.MODEL_REPO}/{dl.MODEL_FILE}"] = "0" * 64
    target = tmp_path / dl.MODEL_FILE
    with pytest.raises(dl.ChecksumError, match="does not match the hub"):
        dl.download(dl.remote_file(), target)
    assert not target.exists() and not dl.part_path(target).exists()
    assert dl.recorded_sha256(target) is None


def test_full_disk_is_reported_and_nothing_is_claimed(hub: LocalHub, tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full to produce a real ENOSPC")
    target = tmp_path / dl.MODEL_FILE
    dl.part_path(target).symlink_to("/dev/full")  # every write there fails with ENOSPC
    with pytest.raises(dl.DiskFullError, match="disk is full"):
        dl.download(dl.remote_file(), target)
    assert not target.exists()
    assert dl.part_path(target).is_symlink()  # not ours to delete


def test_token_protected_repository(
    hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.token = "hf_secret"
    with pytest.raises(dl.DownloadError, match="HF_TOKEN"):
        dl.remote_file()
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    target = dl.download(dl.remote_file(), tmp_path / dl.MODEL_FILE)
    assert target.is_file()
    file_requests = [h for _, p, h in hub.requests if "/resolve/" in p]
    assert file_requests[-1].get("authorization") == "Bearer hf_secret"


def test_model_step_downloads_then_skips_on_rerun(hub: LocalHub, tmp_path: Path) -> None:
    plan = locate_model(None, "", tmp_path)
    assert plan.source == "hub" and plan.bytes_to_download > 0
    assert obtain_model(plan, lambda _q: True, quiet()).status == "pass"
    requests = len(hub.requests)
    again = locate_model(None, "", tmp_path)
    assert again.source == "downloaded" and again.bytes_to_download == 0
    assert obtain_model(again, lambda _q: False, quiet()).status == "pass"
    assert len(hub.requests) == requests  # no network, no re-hash: recorded as verified


def test_declined_download_downloads_nothing(hub: LocalHub, tmp_path: Path) -> None:
    check = obtain_model(locate_model(None, "", tmp_path), lambda _q: False, quiet())
    assert check.status == "fail" and "declined" in check.detail
    assert hub.ranges() == [] and list(tmp_path.iterdir()) == []


def test_someone_elses_file_under_the_model_name_is_never_replaced(
    hub: LocalHub, tmp_path: Path
) -> None:
    theirs = tmp_path / dl.MODEL_FILE
    theirs.write_bytes(b"my own experiment")
    other = tmp_path / "other-model.gguf"
    other.write_bytes(b"another model")
    check = obtain_model(locate_model(None, "", tmp_path), lambda _q: True, quiet())
    assert check.status == "fail" and "left untouched" in check.detail
    assert theirs.read_bytes() == b"my own experiment" and other.read_bytes() == b"another model"
    assert hub.ranges() == []


def test_identical_existing_file_is_adopted_after_hashing(
    hub: LocalHub, tmp_path: Path, model_bytes: bytes
) -> None:
    (tmp_path / dl.MODEL_FILE).write_bytes(model_bytes)
    check = obtain_model(locate_model(None, "", tmp_path), lambda _q: True, quiet())
    assert check.status == "pass" and "matches the hub" in check.detail
    assert hub.ranges() == []
