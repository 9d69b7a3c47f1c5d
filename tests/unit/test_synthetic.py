"""engine.synthetic: random-weight qwen35 GGUFs — complete, deterministic, sane, in every quant mix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine import quants
from engine.gguf_file import open_gguf
from engine.gguf_tensors import expected_tensors
from engine.synthetic import PRESETS, QUANT_MIXES, write_dequantized_copy, write_synthetic
from engine.synthetic_plan import more_bits, tensor_specs, tensor_type
from engine.synthetic_weights import WeightSpec, make_chunk, random_blocks
from openjet.cli import app


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("synth")
    return {
        q: write_synthetic(root / f"tiny-{q}.gguf", "tiny", q, seed=7)
        for q in ("f32", "q4_k_m", "q8_0")
    }


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("quant", sorted(QUANT_MIXES))
def test_every_preset_and_mix_is_a_complete_valid_plan(preset: str, quant: str) -> None:
    p = PRESETS[preset]
    specs = tensor_specs(p)
    names = {s.name for s in specs}
    assert len(names) == len(specs)
    # the plan is exactly the tensor set the loader (and llama.cpp) expects, shapes included
    from engine.gguf_file import Qwen35Config

    config = Qwen35Config(
        n_embd=p.n_embd, n_layer=p.n_layer, n_nextn=p.n_nextn, n_vocab=p.n_vocab, n_ff=p.n_ff,
        n_head=p.n_head, n_head_kv=p.n_head_kv, head_dim=p.head_dim, rms_eps=p.rms_eps,
        rope_n_rot=p.rope_n_rot, rope_sections=p.rope_sections, rope_freq_base=p.rope_freq_base,
        ssm_conv_kernel=p.ssm_conv_kernel, ssm_d_inner=p.ssm_n_v_heads * p.ssm_d_state,
        ssm_d_state=p.ssm_d_state, ssm_n_v_heads=p.ssm_n_v_heads, ssm_n_k_heads=p.ssm_n_k_heads,
        recurrent=p.recurrent, context_length=p.context_length, attention_scale=p.head_dim**-0.5,
    )  # fmt: skip
    expected = expected_tensors(config, names)
    assert {n for n, e in expected.items() if e.required} <= names <= set(expected)
    for spec in specs:
        assert tuple(reversed(spec.shape)) == expected[spec.name].shape, spec.name
        quants.row_bytes(tensor_type(spec, p, quant), spec.cols)  # rows fit whole blocks
    assert (
        sum(p.recurrent) == 3 * p.n_layer // 4
        and len(specs) == 3 + 14 * sum(p.recurrent) + 11 * (p.n_layer - sum(p.recurrent)) + 15
    )


def test_tiny_dimensions() -> None:
    p = PRESETS["tiny"]
    assert (p.n_embd, p.n_layer, p.n_ff, p.n_vocab, p.n_nextn) == (256, 8, 512, 2048, 1)
    assert (p.n_head, p.n_head_kv, p.head_dim, p.ssm_n_k_heads, p.ssm_n_v_heads, p.ssm_d_state) == (
        4,
        2,
        64,
        2,
        4,
        64,
    )


def test_more_bits_selects_the_27b_layers_of_the_spec() -> None:
    chosen = [i for i in range(65) if more_bits(i, 65)]
    assert chosen == [*range(8), *range(10, 56, 3), *range(56, 65)]


def test_files_are_deterministic_and_seeded(tiny: dict[str, Path], tmp_path: Path) -> None:
    again = write_synthetic(tmp_path / "again.gguf", "tiny", "q4_k_m", seed=7)
    assert again.read_bytes() == tiny["q4_k_m"].read_bytes()
    other = open_gguf(write_synthetic(tmp_path / "other.gguf", "tiny", "f32", seed=8))
    assert not np.array_equal(
        other.dequantize("blk.0.ffn_up.weight"),
        open_gguf(tiny["f32"]).dequantize("blk.0.ffn_up.weight"),
    )


def test_quantized_mixes_hold_the_same_model(tiny: dict[str, Path]) -> None:
    exact = open_gguf(tiny["f32"])
    for quant, bound in (("q8_0", 0.01), ("q4_k_m", 0.08)):
        model = open_gguf(tiny[quant])
        for name in (
            "token_embd.weight",
            "blk.0.attn_qkv.weight",
            "blk.3.attn_q.weight",
            "blk.8.nextn.eh_proj.weight",
        ):
            a, b = exact.dequantize(name), model.dequantize(name)
            assert np.sqrt(np.mean((a - b) ** 2)) / np.std(a) < bound, (quant, name)
        assert np.array_equal(exact.dequantize("blk.0.ssm_a"), model.dequantize("blk.0.ssm_a"))


def test_weights_have_their_intended_distributions(tiny: dict[str, Path]) -> None:
    model = open_gguf(tiny["f32"])
    ssm_a = model.dequantize("blk.0.ssm_a")
    assert (ssm_a <= -1).all() and (ssm_a >= -16).all()
    dt = np.log1p(np.exp(model.dequantize("blk.0.ssm_dt.bias")))  # softplus(dt_bias) = initial dt
    assert (dt > 9e-4).all() and (dt < 0.11).all()
    assert abs(float(model.dequantize("blk.1.attn_norm.weight").mean()) - 1.0) < 0.05
    w = model.dequantize("blk.0.ffn_up.weight")
    assert abs(float(w.std()) * np.sqrt(256) - 1.0) < 0.05


def test_tokenizer_and_template_metadata(tiny: dict[str, Path]) -> None:
    meta = open_gguf(tiny["f32"]).metadata
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "qwen35"
    tokens = meta["tokenizer.ggml.tokens"]
    assert (
        len(tokens) == 2048 == len(meta["tokenizer.ggml.token_type"])
        and len(meta["tokenizer.ggml.merges"]) > 500
    )
    assert tokens[meta["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"
    assert tokens[meta["tokenizer.ggml.padding_token_id"]] == "<|endoftext|>"
    assert meta["tokenizer.ggml.add_bos_token"] is False
    assert "<|im_start|>" in meta["tokenizer.chat_template"]
    assert meta["general.file_type"] == 0 and meta["qwen35.nextn_predict_layers"] == 1


def test_dequantized_copy_is_the_f32_oracle(tiny: dict[str, Path], tmp_path: Path) -> None:
    src = open_gguf(tiny["q4_k_m"])
    copy = open_gguf(write_dequantized_copy(tiny["q4_k_m"], tmp_path / "oracle.gguf"))
    assert {t.type_name for t in copy.tensors.values()} == {"F32"}
    assert list(copy.tensors) == list(src.tensors) and copy.config == src.config
    for name in src.tensors:
        assert np.array_equal(copy.dequantize(name), src.dequantize(name)), name
    same_keys = set(src.metadata) - {"general.file_type"}
    assert same_keys <= set(copy.metadata) and copy.metadata["general.file_type"] == 0
    assert list(copy.metadata["tokenizer.ggml.merges"]) == list(
        src.metadata["tokenizer.ggml.merges"]
    )


def test_activations_stay_finite_and_predictions_are_peaked(tiny: dict[str, Path]) -> None:
    from engine.reference import ReferenceModel

    reference = ReferenceModel(open_gguf(tiny["q4_k_m"]))
    tokens = np.random.default_rng(0).integers(0, 1700, size=48).tolist()
    out = reference.forward(reference.new_state(), tokens)
    assert np.isfinite(out.logits).all() and np.isfinite(out.hidden).all()
    logits = out.logits - out.logits.max(axis=1, keepdims=True)
    top1 = 1.0 / np.exp(logits).sum(axis=1)
    assert np.median(top1) > 0.3, np.median(top1)


@pytest.mark.parametrize(
    "ggml_type",
    [quants.Q4_K, quants.Q5_K, quants.Q6_K, quants.Q8_0],
    ids=lambda t: quants.FORMATS[t].name,
)
def test_random_blocks_decode_to_centred_values_of_the_target_spread(ggml_type: int) -> None:
    raw = random_blocks(ggml_type, np.random.default_rng(0), 256 * 64, std=0.02)
    values = quants.dequantize(raw, ggml_type, (64, 256))
    assert np.isfinite(values).all()
    assert abs(float(values.std()) / 0.02 - 1.0) < 0.15 and abs(float(values.mean())) < 0.002


def test_block_path_makes_whole_rows() -> None:
    spec = WeightSpec("blk.0.ffn_up.weight", (300, 512), "normal", 0.05)
    chunk = make_chunk(spec, quants.Q4_K, seed=1, index=3, chunk=0, blocks=True)
    assert chunk.shape == (300, 2 * 144) and chunk.dtype == np.uint8


def test_cli_synth_writes_a_loadable_file(tmp_path: Path) -> None:
    out = tmp_path / "cli.gguf"
    oracle = tmp_path / "cli-f32.gguf"
    result = CliRunner().invoke(
        app,
        [
            "debug",
            "synth",
            "--preset",
            "tiny",
            "--quant",
            "q8_0",
            "--seed",
            "3",
            "--out",
            str(out),
            "--dequantized-copy",
            str(oracle),
        ],
    )
    assert result.exit_code == 0, result.output
    assert open_gguf(out).tensors["blk.0.ffn_up.weight"].type_name == "Q8_0"
    assert open_gguf(oracle).tensors["blk.0.ffn_up.weight"].type_name == "F32"
    bad = CliRunner().invoke(app, ["debug", "synth", "--quant", "q3", "--out", str(out)])
    assert bad.exit_code == 2 and "unknown quant mix 'q3'" in bad.output
