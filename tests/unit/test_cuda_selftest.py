"""The GPU self-test reports a missing GPU as a failed result with a reason, never a traceback."""

from __future__ import annotations

import pytest

from engine.cuda import selftest


def test_selftest_without_a_gpu_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_gpu() -> str:
        raise RuntimeError("cudaErrorNoDevice")

    monkeypatch.setattr(selftest, "_gpu_name", no_gpu)
    result = selftest.run_selftest()
    assert not result.ok
    assert "CUDA is not available here" in result.reason
    assert "cudaErrorNoDevice" in result.reason


def test_selftest_result_detail_is_the_reason_when_failed() -> None:
    failed = selftest.SelfTestResult(ok=False, reason="CUDA is not available here: x")
    assert failed.detail == "CUDA is not available here: x"
    passed = selftest.SelfTestResult(
        ok=True, gpu="G", top1=0.996, mean_kl=1e-4, decode_tok_per_s=900
    )
    assert "passed on G" in passed.detail and "99.6%" in passed.detail
