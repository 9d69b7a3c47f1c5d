"""The numpy forward pass of the qwen35 architecture, including the MTP head (spec 4 and 6).

This is the engine's exact oracle and its CPU backend. Weights are dequantized once to float32 and
every activation and state stays f32, as in llama.cpp. `forward` runs tokens at the next positions
of one sequence and updates its `SequenceState` in place, so a prompt processed whole, in chunks
or one token at a time gives the same logits (to f32 rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.reference_attention import AttentionShape, attention_mixer
from engine.reference_deltanet import DeltaNetShape, deltanet_mixer, new_deltanet_state
from engine.reference_ops import linear, rms_norm, swiglu_ffn
from engine.reference_state import DeltaNetState, KVCache, SequenceState
from engine.reference_weights import AttentionWeights, LayerWeights, MTPWeights, load_weights

if TYPE_CHECKING:
    from engine.gguf_file import GGUFModel

__all__ = ["ReferenceModel", "SequenceState", "StepOutput"]

Array = np.ndarray


@dataclass
class StepOutput:
    logits: Array  # float32 [T, n_vocab]
    hidden: Array  # float32 [T, n_embd]: the normalized final hidden (after output_norm / the
    # MTP head's shared_head_norm) = the MTP input of the next position


class ReferenceModel:
    """A qwen35 model held as float32 numpy arrays; stateless apart from its weights."""

    def __init__(self, model: GGUFModel) -> None:
        self.config = model.config
        self.weights = load_weights(model)
        self.n_vocab = self.weights.output.shape[0]
        self._deltanet_shape = DeltaNetShape.from_config(self.config)
        self._attention_shape = AttentionShape.from_config(self.config)

    # -- state ------------------------------------------------------------------------------

    def new_state(self) -> SequenceState:
        shape = self._attention_shape
        layers: list[KVCache | DeltaNetState] = [
            new_deltanet_state(self._deltanet_shape)
            if recurrent
            else KVCache(shape.n_head_kv, shape.head_dim)
            for recurrent in self.config.recurrent[: self.config.n_layer]
        ]
        has_mtp = self.weights.mtp is not None
        mtp_kv = KVCache(shape.n_head_kv, shape.head_dim) if has_mtp else None
        return SequenceState(layers=layers, mtp_kv=mtp_kv)

    # -- trunk ------------------------------------------------------------------------------

    def forward(self, state: SequenceState, tokens: Sequence[int]) -> StepOutput:
        """Run `tokens` at positions state.n_past, … and advance the state (spec 4.3, 4.8)."""
        ids = self._checked_tokens(tokens)
        x = self.weights.embed[ids]
        for layer, layer_state in zip(self.weights.layers, state.layers, strict=True):
            x = self._block(x, layer, layer_state)
        hidden = rms_norm(x, self.weights.output_norm, self.config.rms_eps)
        if state.n_past == 0:
            state.first_token = int(ids[0])
        state.n_past += len(ids)
        return StepOutput(logits=linear(hidden, self.weights.output), hidden=hidden)

    def _block(self, x: Array, layer: LayerWeights, layer_state: KVCache | DeltaNetState) -> Array:
        """One pre-norm block: x + mixer(norm(x)), then + FFN(norm(·)) (spec 4.3)."""
        eps = self.config.rms_eps
        a = rms_norm(x, layer.attn_norm, eps)
        if isinstance(layer.mixer, AttentionWeights):
            assert isinstance(layer_state, KVCache)
            m = attention_mixer(a, layer.mixer, layer_state, self._attention_shape)
        else:
            assert isinstance(layer_state, DeltaNetState)
            m = deltanet_mixer(a, layer.mixer, layer_state, self._deltanet_shape)
        x = x + m
        f = layer.ffn
        return x + swiglu_ffn(rms_norm(x, layer.post_norm, eps), f.gate, f.up, f.down)

    # -- MTP head ---------------------------------------------------------------------------

    def mtp_forward(self, state: SequenceState, tokens: Sequence[int], hidden: Array) -> StepOutput:
        """Run the MTP head on rows at positions state.mtp_n_past + 1, … (spec 6.1).

        tokens[i] is the token at position mtp_n_past + i + 1 and hidden[i] the normalized hidden
        at position mtp_n_past + i — the trunk's (catch-up, first draft step) or this head's own
        previous output (chained drafts). Row i's logits predict position mtp_n_past + i + 2.
        The head's KV also holds position 0 (the sequence's first token with a zero hidden, as a
        fresh llama.cpp draft context has it, spec 6.2); the first call adds it implicitly.
        """
        mtp = self._mtp_weights()
        ids = self._checked_tokens(tokens)
        h = np.asarray(hidden, dtype=np.float32).reshape(len(ids), self.config.n_embd)
        assert state.mtp_kv is not None
        if state.mtp_kv.length == 0:
            if state.first_token is None:
                raise ValueError("mtp_forward needs the trunk to have run position 0 first")
            zero = np.zeros((1, self.config.n_embd), dtype=np.float32)
            self._mtp_rows(mtp, state.mtp_kv, np.array([state.first_token]), zero)
        if state.mtp_kv.length != state.mtp_n_past + 1:
            raise ValueError(
                f"MTP cache holds {state.mtp_kv.length} rows but mtp_n_past is {state.mtp_n_past}"
            )
        out = self._mtp_rows(mtp, state.mtp_kv, ids, h)
        state.mtp_n_past += len(ids)
        return out

    def _mtp_rows(self, mtp: MTPWeights, cache: KVCache, ids: Array, hidden: Array) -> StepOutput:
        eps = self.config.rms_eps
        e = rms_norm(mtp.embed[ids], mtp.enorm, eps)
        hh = rms_norm(hidden, mtp.hnorm, eps)
        u = linear(np.concatenate([e, hh], axis=1), mtp.eh_proj)  # embedding half first
        block = mtp.block
        assert isinstance(block.mixer, AttentionWeights)
        a = u + attention_mixer(
            rms_norm(u, block.attn_norm, eps), block.mixer, cache, self._attention_shape
        )
        f = block.ffn
        m = a + swiglu_ffn(rms_norm(a, block.post_norm, eps), f.gate, f.up, f.down)
        hm = rms_norm(m, mtp.head_norm, eps)
        return StepOutput(logits=linear(hm, mtp.head), hidden=hm)

    def _mtp_weights(self) -> MTPWeights:
        if self.weights.mtp is None:
            raise ValueError("this model has no MTP head (nextn_predict_layers is 0)")
        return self.weights.mtp

    def _checked_tokens(self, tokens: Sequence[int]) -> Array:
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("no tokens to run")
        bad = ids[(ids < 0) | (ids >= self.weights.embed.shape[0])]
        if bad.size:
            raise ValueError(
                f"token id {int(bad[0])} is outside the vocabulary (0..{self.n_vocab - 1})"
            )
        return ids
