"""The KV pool's default size on the GPU: the tokens whose q8_0 K and V, in every attention
slab, fit in the memory left once the weights and the step's other buffers are allocated."""

from __future__ import annotations

from engine.cuda.model import Dims

# Left free beside the pool: CUDA graphs, the allocator's slack, kernels loaded later, and the
# other processes a desktop GPU serves.
RESERVE_BYTES = 768 << 20
ROUND_TOKENS = 1024  # pool sizes are multiples of this
MIN_TOKENS = 4096  # below this the GPU is too small for the model: say so at load time


class NotEnoughMemory(RuntimeError):
    """The weights leave too little GPU memory for a useful KV pool."""


def kv_bytes_per_token(dims: Dims, slabs: int) -> int:
    """One token's K and V in every slab: head_dim int8 codes and head_dim / 32 f16 scales per
    KV head."""
    per_head = dims.head_dim + 2 * (dims.head_dim // 32)
    return 2 * slabs * dims.n_head_kv * per_head


def kv_tokens_that_fit(free_bytes: int, per_token: int, cap: int) -> int:
    """The pool size for free_bytes of free GPU memory (at most cap tokens), or NotEnoughMemory
    with the numbers when it would be under MIN_TOKENS."""
    usable = free_bytes - RESERVE_BYTES
    tokens = min(max(usable, 0) // per_token, cap) // ROUND_TOKENS * ROUND_TOKENS
    if tokens < MIN_TOKENS:
        raise NotEnoughMemory(
            f"{free_bytes / 2**30:.2f} GiB of GPU memory is left after loading the model: a KV "
            f"pool of {MIN_TOKENS} tokens needs {(MIN_TOKENS * per_token + RESERVE_BYTES) / 2**30:.2f}"
            " GiB (set a smaller pool with --kv-tokens, fewer slots, or use a smaller model)"
        )
    return tokens
