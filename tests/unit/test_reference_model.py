"""The reference model on a small hand-made qwen35 (random weights held in memory, no file):
chunking invariance of the trunk and the MTP head, state copies, and clear errors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from engine.gguf_file import Qwen35Config
from engine.reference import ReferenceModel

N_EMBD, N_VOCAB, N_FF = 32, 61, 48
RECURRENT = (True, True, True, False, True, False)


def small_config() -> Qwen35Config:
    return Qwen35Config(
        n_embd=N_EMBD, n_layer=len(RECURRENT), n_nextn=1, n_vocab=N_VOCAB, n_ff=N_FF,
        n_head=4, n_head_kv=2, head_dim=16, rms_eps=1e-6, rope_n_rot=8,
        rope_sections=(2, 1, 1, 0), rope_freq_base=1e4, ssm_conv_kernel=4, ssm_d_inner=4 * 8,
        ssm_d_state=8, ssm_n_v_heads=4, ssm_n_k_heads=2, recurrent=RECURRENT,
        context_length=4096, attention_scale=0.25,
    )  # fmt: skip


class InMemoryModel:
    """Just enough of GGUFModel for ReferenceModel: config, has(), dequantize()."""

    def __init__(self, config: Qwen35Config, seed: int) -> None:
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}
        self._globals()
        for i, recurrent in enumerate(config.recurrent):
            self._block(i, recurrent)
        self._block(config.n_layer, recurrent=False)
        self._nextn(config.n_layer)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def dequantize(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def _put(self, name: str, *shape: int, scale: float | None = None, norm: bool = False) -> None:
        if norm:
            values = 1.0 + 0.1 * self.rng.standard_normal(shape)
        else:
            values = self.rng.standard_normal(shape) * (scale or 1.0 / np.sqrt(shape[-1]))
        self.tensors[name] = values.astype(np.float32)

    def _globals(self) -> None:
        self._put("token_embd.weight", N_VOCAB, N_EMBD, scale=1.0)
        self._put("output_norm.weight", N_EMBD, norm=True)
        self._put("output.weight", N_VOCAB, N_EMBD, scale=0.5)

    def _block(self, i: int, recurrent: bool) -> None:
        c, p = self.config, f"blk.{i}"
        self._put(f"{p}.attn_norm.weight", N_EMBD, norm=True)
        self._put(f"{p}.post_attention_norm.weight", N_EMBD, norm=True)
        self._put(f"{p}.ffn_gate.weight", N_FF, N_EMBD)
        self._put(f"{p}.ffn_up.weight", N_FF, N_EMBD)
        self._put(f"{p}.ffn_down.weight", N_EMBD, N_FF)
        if recurrent:
            key_width = c.ssm_n_k_heads * c.ssm_d_state
            self._put(f"{p}.attn_qkv.weight", 2 * key_width + c.ssm_d_inner, N_EMBD)
            self._put(f"{p}.attn_gate.weight", c.ssm_d_inner, N_EMBD)
            self._put(f"{p}.ssm_conv1d.weight", 2 * key_width + c.ssm_d_inner, 4, scale=0.5)
            self._put(f"{p}.ssm_dt.bias", c.ssm_n_v_heads, scale=0.5)
            self.tensors[f"{p}.ssm_a"] = -np.exp(self.rng.standard_normal(c.ssm_n_v_heads)).astype(
                np.float32
            )
            self._put(f"{p}.ssm_beta.weight", c.ssm_n_v_heads, N_EMBD)
            self._put(f"{p}.ssm_alpha.weight", c.ssm_n_v_heads, N_EMBD)
            self._put(f"{p}.ssm_norm.weight", c.ssm_d_inner // c.ssm_n_v_heads, norm=True)
            self._put(f"{p}.ssm_out.weight", N_EMBD, c.ssm_d_inner)
        else:
            self._put(f"{p}.attn_q.weight", c.n_head * 2 * c.head_dim, N_EMBD)
            self._put(f"{p}.attn_k.weight", c.n_head_kv * c.head_dim, N_EMBD)
            self._put(f"{p}.attn_v.weight", c.n_head_kv * c.head_dim, N_EMBD)
            self._put(f"{p}.attn_q_norm.weight", c.head_dim, norm=True)
            self._put(f"{p}.attn_k_norm.weight", c.head_dim, norm=True)
            self._put(f"{p}.attn_output.weight", N_EMBD, c.n_head * c.head_dim)

    def _nextn(self, i: int) -> None:
        p = f"blk.{i}.nextn"
        self._put(f"{p}.eh_proj.weight", N_EMBD, 2 * N_EMBD)
        for name in ("enorm", "hnorm", "shared_head_norm"):
            self._put(f"{p}.{name}.weight", N_EMBD, norm=True)


@pytest.fixture(scope="module")
def model() -> ReferenceModel:
    return ReferenceModel(InMemoryModel(small_config(), seed=7))  # type: ignore[arg-type]


PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, N_VOCAB, size=40)]


def run_in_chunks(model: ReferenceModel, tokens: Sequence[int], sizes: Sequence[int]) -> np.ndarray:
    state, rows, start = model.new_state(), [], 0
    for size in sizes:
        rows.append(model.forward(state, tokens[start : start + size]).logits)
        start += size
    assert start == len(tokens) and state.n_past == len(tokens)
    return np.concatenate(rows)


def max_relative_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_whole_chunked_and_one_at_a_time_prompts_agree(model: ReferenceModel) -> None:
    whole = run_in_chunks(model, PROMPT, [40])
    assert whole.shape == (40, N_VOCAB) and whole.dtype == np.float32
    assert np.isfinite(whole).all()
    chunked = run_in_chunks(model, PROMPT, [7, 1, 13, 19])
    single = run_in_chunks(model, PROMPT, [1] * 40)
    assert max_relative_gap(chunked, whole) <= 1e-4
    assert max_relative_gap(single, whole) <= 1e-4


def test_each_position_depends_on_the_prefix(model: ReferenceModel) -> None:
    # The same token at position 1 gives different logits after different first tokens, and
    # changing a late token leaves earlier rows exactly unchanged (causality).
    a = run_in_chunks(model, [3, 5, 9], [3])
    b = run_in_chunks(model, [4, 5, 9], [3])
    assert not np.allclose(a[1], b[1], atol=1e-3)
    c = run_in_chunks(model, [3, 5, 10], [3])
    assert np.array_equal(a[:2], c[:2])


def test_state_copy_is_independent(model: ReferenceModel) -> None:
    state = model.new_state()
    model.forward(state, PROMPT[:20])
    checkpoint = state.copy()
    first = model.forward(state, PROMPT[20:25]).logits
    again = model.forward(checkpoint, PROMPT[20:25]).logits
    assert np.array_equal(first, again)
    assert checkpoint.n_past == state.n_past == 25


def mtp_catch_up(model: ReferenceModel, sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Trunk over PROMPT, then the MTP head over every position in chunks of `sizes`."""
    state = model.new_state()
    hidden = model.forward(state, PROMPT).hidden
    logits, hms, start = [], [], 0
    for size in sizes:
        out = model.mtp_forward(
            state, PROMPT[start + 1 : start + 1 + size], hidden[start : start + size]
        )
        logits.append(out.logits)
        hms.append(out.hidden)
        start += size
    assert state.mtp_n_past == len(PROMPT) - 1
    return np.concatenate(logits), np.concatenate(hms)


def test_mtp_catch_up_is_chunking_invariant(model: ReferenceModel) -> None:
    whole_logits, whole_hidden = mtp_catch_up(model, [39])
    assert whole_logits.shape == (39, N_VOCAB) and whole_hidden.shape == (39, N_EMBD)
    for sizes in ([1] * 39, [5, 1, 20, 13]):
        logits, hidden = mtp_catch_up(model, sizes)
        assert max_relative_gap(logits, whole_logits) <= 1e-4
        assert max_relative_gap(hidden, whole_hidden) <= 1e-4


def test_mtp_chained_drafts_roll_back(model: ReferenceModel) -> None:
    state = model.new_state()
    out = model.forward(state, PROMPT[:10])
    model.mtp_forward(state, PROMPT[1:10], out.hidden[:9])
    y = int(np.argmax(out.logits[-1]))
    step1 = model.mtp_forward(state, [y], out.hidden[9:10])  # draft for position 11
    d1 = int(np.argmax(step1.logits[0]))
    step2 = model.mtp_forward(state, [d1], step1.hidden)  # chained: its own hidden
    assert state.mtp_n_past == 11 and np.isfinite(step2.logits).all()
    state.truncate_mtp(9)  # drop the draft region
    again = model.mtp_forward(state, [y], out.hidden[9:10])
    assert np.array_equal(again.logits, step1.logits)


def test_bad_input_is_a_clear_error(model: ReferenceModel) -> None:
    state = model.new_state()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.forward(state, [N_VOCAB])
    with pytest.raises(ValueError, match="no tokens"):
        model.forward(state, [])
    with pytest.raises(ValueError, match="position 0"):
        model.mtp_forward(state, [1], np.zeros((1, N_EMBD), np.float32))
