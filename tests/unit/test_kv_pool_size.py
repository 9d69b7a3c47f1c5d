"""The CUDA backend's default KV pool size (engine/cuda/memory.py), on the CPU: the 27B shape's
bytes per token, a 24 GB card's pool, the cap and the clear error on a card that is too small."""

from __future__ import annotations

import pytest

from engine.cuda.memory import (
    MIN_TOKENS,
    NotEnoughMemory,
    kv_bytes_per_token,
    kv_tokens_that_fit,
)
from engine.cuda.model import Dims
from engine.synthetic_plan import PRESETS

GIB = 1 << 30


def test_27b_token_bytes() -> None:
    dims = Dims.of(PRESETS["27b"])
    # 16 attention layers (+ the MTP block), 4 KV heads of 256 int8 codes and 8 f16 scales, K and V
    assert kv_bytes_per_token(dims, 16) == 2 * 16 * 4 * (256 + 16) == 34816
    assert kv_bytes_per_token(dims, 17) == 36992


def test_a_24gb_card_holds_131072_tokens_beside_the_27b_model() -> None:
    """24 GiB less ~17.1 GB of Q4_K_M weights with the MTP block and ~1.8 GiB of step buffers
    (four slots' DeltaNet states, saved projections, scratch) leaves ~5 GiB."""
    free = int(24 * GIB - 17.1e9 - 1.8 * GIB)
    tokens = kv_tokens_that_fit(free, 36992, 4 * 262144)
    assert tokens >= 131072
    assert tokens % 1024 == 0


def test_the_pool_is_capped_and_a_small_card_is_a_clear_error() -> None:
    assert kv_tokens_that_fit(100 * GIB, 36992, 65536) == 65536
    with pytest.raises(NotEnoughMemory, match="GiB of GPU memory is left") as err:
        kv_tokens_that_fit(int(0.5 * GIB), 36992, 262144)
    assert str(MIN_TOKENS) in str(err.value)
