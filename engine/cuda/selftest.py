"""GPU self-test for the setup wizard: build the kernels for this GPU, run a small synthetic model
on CudaBackend against the exact numpy reference, and time a short decode.

`run_selftest(model_path)` never raises: every failure (no CuPy, no GPU, a tensor type without a
kernel, a compile error, wrong logits) comes back as `SelfTestResult(ok=False, reason=...)` so
the caller can fall back to llama-server and say why; `detail` says what passed. With a model
path, the model's tensor types are checked and the op kernels are compiled for its shape too
(the weights are not loaded: that is `openjet serve`'s job).
"""

from __future__ import annotations

import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TOP1_MIN = 0.98  # overall; every position with a clear top-2 gap must agree (see the tests)
CLEAR_GAP = 0.1
CHUNK = 60
KL_MAX = 1e-3


@dataclass
class SelfTestResult:
    ok: bool
    reason: str = ""
    gpu: str = ""
    top1: float = 0.0
    mean_kl: float = float("inf")
    decode_tok_per_s: float = 0.0
    seconds: float = 0.0
    details: dict[str, float] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        if not self.ok:
            return self.reason
        return (
            f"self-test passed on {self.gpu}: top-1 {self.top1:.1%}, mean KL {self.mean_kl:.1e} "
            f"vs the reference, {self.decode_tok_per_s:.0f} tok/s on the synthetic model"
        )


def _gpu_name() -> str:
    import cupy as cp

    return str(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())


def _compare(path: Path, n_tokens: int) -> tuple[float, float, object]:
    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan
    from engine.cuda.backend import CudaBackend
    from engine.cuda.model import from_gguf
    from engine.gguf_file import open_gguf
    from engine.reference import ReferenceModel
    from engine.reference_ops import kl_rows, top2_gap

    gguf = open_gguf(path)
    tokens = tuple(
        int(t) for t in np.random.default_rng(0).integers(0, gguf.config.n_vocab, n_tokens)
    )
    ref = ReferenceModel(gguf)
    want = ref.forward(ref.new_state(), tokens).logits
    backend = CudaBackend(
        from_gguf(gguf), n_slots=1, kv_tokens=max(1024, 2 * n_tokens), max_rows=64
    )
    parts = []
    for i in range(0, n_tokens, CHUNK):  # every row's logits come back, in chunks of <= 64
        step = SlotStep(0, RowKind.PREFILL, tokens[i : i + CHUNK], i, GREEDY, return_logits=True)
        logits = backend.step(StepPlan((step,))).for_slot(0).logits
        assert logits is not None
        parts.append(logits)
    got = np.concatenate(parts)
    kl = float(np.mean(kl_rows(want, got)))
    agree = np.argmax(want, -1) == np.argmax(got, -1)
    clear = top2_gap(want) >= CLEAR_GAP
    if not agree[clear].all():
        kl = float("inf")  # a clear top-1 differs: as bad as it gets
    return float(agree.mean()), kl, backend


def check_model(model_path: Path) -> None:
    """Every 2-D tensor has a kernel for its type and shape; the op kernels compile for the
    model's dimensions. Raises (GGUFError, WeightFormatError, KernelBuildError) otherwise."""
    from engine.cuda import build, weights
    from engine.cuda.model import Dims
    from engine.gguf_file import open_gguf

    gguf = open_gguf(model_path)
    for name, info in gguf.tensors.items():
        if len(info.shape) == 2 and ".ssm_conv1d." not in name:
            weights.check_shape(name, info.ggml_type, int(info.shape[1]), int(info.shape[0]))
    build.matmul_module(build.MATMUL_CONFIG)
    build.ops_module(Dims.of(gguf.config).kernel_dims(16))


def _decode_speed(backend: object, n_steps: int = 32) -> float:
    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan

    token = 1
    start = time.perf_counter()
    for _ in range(n_steps):
        length = backend.slot_length(0)  # type: ignore[attr-defined]
        step = SlotStep(0, RowKind.DECODE, (token,), length, GREEDY)
        token = backend.step(StepPlan((step,))).for_slot(0).accepted[-1]  # type: ignore[attr-defined]
    return n_steps / (time.perf_counter() - start)


def run_selftest(
    model_path: str | Path | None = None,
    preset: str = "tiny",
    quant: str = "q4_k_m",
    n_tokens: int = 240,
) -> SelfTestResult:
    started = time.perf_counter()
    result = SelfTestResult(ok=False)
    try:
        result.gpu = _gpu_name()
    except Exception as exc:  # no CuPy, no driver, no device
        result.reason = f"CUDA is not available here: {exc}"
        return result
    try:
        from engine.synthetic import write_synthetic

        if model_path is not None:
            check_model(Path(model_path))
        with tempfile.TemporaryDirectory() as tmp:
            path = write_synthetic(Path(tmp) / "selftest.gguf", preset, quant, seed=1)
            result.top1, result.mean_kl, backend = _compare(path, n_tokens)
            result.decode_tok_per_s = _decode_speed(backend)
    except Exception as exc:
        result.reason = f"GPU self-test failed: {exc.__class__.__name__}: {exc}"
        result.details["traceback_lines"] = float(len(traceback.format_exc().splitlines()))
        result.seconds = time.perf_counter() - started
        return result
    result.seconds = time.perf_counter() - started
    if result.top1 < TOP1_MIN or result.mean_kl > KL_MAX:
        result.reason = (
            f"logits differ from the reference: top-1 {result.top1:.3f}, "
            f"mean KL {result.mean_kl:.2e}"
        )
        return result
    result.ok = True
    return result


if __name__ == "__main__":
    print(run_selftest())
