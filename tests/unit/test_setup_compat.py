"""Model compatibility levels on real (synthetic) GGUF files, and the real hardware probe."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.synthetic import PRESETS, write_synthetic
from setup_wizard.compat import check_model
from setup_wizard.hardware import probe_hardware
from setup_wizard.wizard import compatibility_check


def write_minimal_gguf(path: Path, arch: str, tensor_type: gguf.GGMLQuantizationType) -> Path:
    """A small GGUF with one tensor of the given type (compat only reads the header here)."""
    writer = gguf.GGUFWriter(str(path), arch)
    if tensor_type == gguf.GGMLQuantizationType.F32:
        writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    else:
        block, size = gguf.GGML_QUANT_SIZES[tensor_type]
        raw = np.zeros((4, 64 // block * size), dtype=np.uint8)
        writer.add_tensor("token_embd.weight", raw, raw_dtype=tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_synthetic_qwen35_is_fully_compatible(tmp_path: Path) -> None:
    compat = check_model(write_synthetic(tmp_path / "tiny.gguf", "tiny", "q8_0", 0))
    assert compat.level == "full" and compat.engine_can_run
    assert compat.architecture == "qwen35" and compat.context_length == 16384
    assert set(compat.tensor_types) == {"Q8_0", "F32"}
    # 2 attention layers of tiny x 2 KV heads x 64 dims x (K, V) in q8_0
    assert compat.kv_bytes_per_token == 2 * 2 * 64 * 2 * 34 // 32
    assert compatibility_check(compat).status == "pass"


def test_missing_mtp_head_is_partial_and_says_what_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        PRESETS, "tiny-no-mtp", replace(PRESETS["tiny"], name="tiny-no-mtp", n_nextn=0)
    )
    compat = check_model(write_synthetic(tmp_path / "nomtp.gguf", "tiny-no-mtp", "f32", 0))
    assert compat.level == "partial" and compat.engine_can_run
    assert "MTP" in compat.problem and any("MTP" in loss for loss in compat.losses)  # type: ignore[operator]
    check = compatibility_check(compat)
    assert check.status == "warn" and "MTP" in check.hint


def test_unsupported_tensor_type_is_llama_server_only(tmp_path: Path) -> None:
    path = write_minimal_gguf(tmp_path / "iq.gguf", "qwen35", gguf.GGMLQuantizationType.Q4_0)
    compat = check_model(path)
    assert compat.level == "llama-server" and not compat.engine_can_run
    assert "Q4_0" in (compat.problem or "") and compat.tensor_types == {"Q4_0": 1}


def test_other_architecture_is_llama_server_only(tmp_path: Path) -> None:
    compat = check_model(
        write_minimal_gguf(tmp_path / "llama.gguf", "llama", gguf.GGMLQuantizationType.F32)
    )
    assert compat.level == "llama-server" and compat.architecture == "llama"
    assert "not qwen35" in (compat.problem or "")


def test_broken_files_are_unusable_not_crashes(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 10)
    assert check_model(junk).level == "unusable"
    whole = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 0)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    compat = check_model(cut)
    assert compat.level == "unusable" and "truncated" in (compat.problem or "")
    assert compatibility_check(compat).status == "fail"


def test_real_probe_reports_this_machine(tmp_path: Path) -> None:
    hw = probe_hardware(tmp_path / "models")
    assert hw.os_name and hw.cpu_cores >= 1 and hw.ram_total_bytes > 0
    assert hw.disk_free_bytes > 0 and Path(hw.disk_path).exists()
    if hw.gpus:
        assert hw.gpu_source in ("nvml", "nvidia-smi") and hw.driver_cuda_version
    else:  # no driver: says so instead of failing
        assert hw.gpu_source is None and any(
            "NVIDIA" in note or "NVML" in note for note in hw.notes
        )
