"""engine.gguf_file: opening qwen35 GGUFs, and rejecting broken ones with a message that says why."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from engine import quants
from engine.gguf_file import GGUFError, GGUFModel, open_gguf
from engine.synthetic import PRESETS, write_skeleton, write_synthetic


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    return {
        q: write_synthetic(root / f"tiny-{q}.gguf", "tiny", q, seed=0)
        for q in ("f32", "q4_k_m", "mixed")
    }


# --- helpers to make broken files ------------------------------------------------------------

Edit = Callable[[str, np.ndarray, int], tuple[np.ndarray, int] | None]


def rewrite(
    src: Path,
    dst: Path,
    meta: dict[str, Any] | None = None,
    arch: str = "qwen35",
    edit: Edit | None = None,
) -> Path:
    """Copy `src` to `dst`; `meta` maps key -> (value, GGUFValueType) or None (delete);
    `edit(name, values_f32, type)` returns new (values, type) or None to drop the tensor."""
    model = open_gguf(src)
    writer = gguf.GGUFWriter(dst, arch)
    meta = meta or {}
    for key, item in model.header.metadata.items():
        if key in ("general.architecture", "general.alignment") or key in meta:
            continue
        value = item.value.tolist() if isinstance(item.value, np.ndarray) else item.value
        value = list(value) if item.subtype == gguf.GGUFValueType.STRING else value
        sub = gguf.GGUFValueType(item.subtype) if item.subtype is not None else None
        writer.add_key_value(key, value, gguf.GGUFValueType(item.vtype), sub_type=sub)
    for key, new in meta.items():
        if new is not None:
            writer.add_key_value(key, new[0], new[1])
    for name, info in model.tensors.items():
        values, ggml_type = model.dequantize(name), info.ggml_type
        if edit is not None:
            changed = edit(name, values, ggml_type)
            if changed is None:
                continue
            values, ggml_type = changed
        raw = quants.quantize(values.reshape(-1, values.shape[-1]), ggml_type)
        writer.add_tensor(
            name,
            raw.reshape(*values.shape[:-1], -1),
            raw_dtype=gguf.GGMLQuantizationType(ggml_type),
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def rejects(path: Path, *fragments: str) -> None:
    with pytest.raises(GGUFError) as info:
        open_gguf(path)
    message = str(info.value)
    assert str(path) in message or path.name in message, message
    for fragment in fragments:
        assert fragment in message, message


# --- opening good files ----------------------------------------------------------------------


def test_config_is_read_from_the_file(files: dict[str, Path]) -> None:
    model = open_gguf(files["f32"])
    c, p = model.config, PRESETS["tiny"]
    assert (c.n_embd, c.n_layer, c.n_nextn, c.n_vocab, c.n_ff) == (
        p.n_embd,
        p.n_layer,
        1,
        p.n_vocab,
        p.n_ff,
    )
    assert (c.n_head, c.n_head_kv, c.head_dim, c.rope_n_rot) == (
        p.n_head,
        p.n_head_kv,
        p.head_dim,
        p.rope_n_rot,
    )
    assert (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_d_state) == (
        p.ssm_n_k_heads,
        p.ssm_n_v_heads,
        p.ssm_d_state,
    )
    assert c.ssm_d_inner == p.ssm_n_v_heads * p.ssm_d_state and c.ssm_conv_kernel == 4
    assert c.recurrent == (True, True, True, False, True, True, True, False)
    assert c.rope_sections == p.rope_sections and c.rope_freq_base == 1.0e7
    assert c.rms_eps == pytest.approx(1e-6) and c.attention_scale == pytest.approx(1 / 8)
    assert c.context_length == p.context_length


def test_tensor_index_and_views(files: dict[str, Path]) -> None:
    model = open_gguf(files["q4_k_m"])
    assert len(model.tensors) == 124 and model.has("blk.8.nextn.eh_proj.weight")
    info = model.tensors["blk.0.ffn_down.weight"]
    assert info.shape == (512, 256) and info.type_name == "Q6_K" and info.n_bytes == 256 * 2 * 210
    raw = model.raw("blk.0.ffn_down.weight")
    assert raw.dtype == np.uint8 and raw.size == info.n_bytes and not raw.flags.writeable
    assert model.dequantize("blk.0.ffn_down.weight").shape == (256, 512)
    assert model.dequantize("output_norm.weight").shape == (256,)
    assert (
        model.metadata["tokenizer.ggml.tokens"][model.metadata["tokenizer.ggml.eos_token_id"]]
        == "<|im_end|>"
    )
    with pytest.raises(GGUFError, match="no tensor named 'nope'"):
        model.raw("nope")


def test_q4_k_m_follows_llamacpp_recipe(files: dict[str, Path]) -> None:
    types = {name: t.type_name for name, t in open_gguf(files["q4_k_m"]).tensors.items()}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    # use_more_bits(i, 9): layers 0, 3, 6 and the last eighth (7, 8)
    promoted = {0, 3, 6, 7, 8}
    for layer in range(9):
        v_like = (
            f"blk.{layer}.attn_qkv.weight"
            if f"blk.{layer}.attn_qkv.weight" in types
            else f"blk.{layer}.attn_v.weight"
        )
        expected = "Q6_K" if layer in promoted else "Q4_K"
        assert types[v_like] == expected and types[f"blk.{layer}.ffn_down.weight"] == expected, (
            layer
        )
    assert {
        types[n]
        for n in types
        if n.endswith(("_norm.weight", "ssm_a", "ssm_dt.bias", "ssm_conv1d.weight"))
    } == {"F32"}
    assert (
        types["blk.1.ssm_alpha.weight"] == "Q4_K" and types["blk.8.nextn.eh_proj.weight"] == "Q4_K"
    )


def test_mixed_file_uses_every_type_and_matches_gguf_reader(files: dict[str, Path]) -> None:
    model = open_gguf(files["mixed"])
    assert {t.type_name for t in model.tensors.values()} == {
        "F32",
        "F16",
        "BF16",
        "Q8_0",
        "Q4_K",
        "Q5_K",
        "Q6_K",
    }
    for tensor in gguf.GGUFReader(files["mixed"]).tensors:
        ref = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        ours = model.dequantize(tensor.name)
        assert np.array_equal(ours.reshape(-1), ref.reshape(-1)), tensor.name
        assert model.tensors[tensor.name].offset == tensor.data_offset


def test_layer_types_fall_back_to_the_interval_rule(files: dict[str, Path], tmp_path: Path) -> None:
    path = rewrite(
        files["f32"], tmp_path / "no-flags.gguf", meta={"qwen35.attention.recurrent_layers": None}
    )
    assert open_gguf(path).config.recurrent == open_gguf(files["f32"]).config.recurrent


def test_file_without_mtp_block_is_accepted(files: dict[str, Path], tmp_path: Path) -> None:
    no_mtp = {
        "qwen35.block_count": (8, gguf.GGUFValueType.UINT32),
        "qwen35.nextn_predict_layers": None,
        "qwen35.attention.recurrent_layers": None,
    }
    path = rewrite(
        files["f32"],
        tmp_path / "trunk.gguf",
        meta=no_mtp,
        edit=lambda n, v, t: None if n.startswith("blk.8.") else (v, t),
    )
    config = open_gguf(path).config
    assert (config.n_layer, config.n_nextn) == (8, 0) and len(config.recurrent) == 8


@pytest.mark.slow
def test_27b_shaped_file_opens_fast(tmp_path: Path) -> None:
    path = write_skeleton(tmp_path / "27b.gguf", "27b", "q4_k_m")  # sparse: ~5 MB on disk
    start = time.perf_counter()
    model = open_gguf(path)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"opening took {elapsed:.2f} s"
    c = model.config
    assert (c.n_embd, c.n_layer, c.n_vocab, c.n_ff, c.n_head, c.n_head_kv, c.head_dim) == (
        5120,
        64,
        248320,
        17408,
        24,
        4,
        256,
    )
    assert (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_d_inner, c.rope_n_rot) == (16, 48, 6144, 64)
    assert len(model.tensors) == 866 and sum(c.recurrent) == 48
    assert model.tensors["output.weight"].type_name == "Q6_K"
    assert sum(t.n_bytes for t in model.tensors.values()) == pytest.approx(16.8e9, rel=0.01)
    assert model.metadata["tokenizer.ggml.tokens"][248046] == "<|im_end|>"


# --- rejecting bad files ---------------------------------------------------------------------


def test_rejects_wrong_architecture(files: dict[str, Path], tmp_path: Path) -> None:
    rejects(
        rewrite(files["f32"], tmp_path / "llama.gguf", arch="llama"),
        "architecture is 'llama'",
        "qwen35",
    )


def test_rejects_missing_tensor(files: dict[str, Path], tmp_path: Path) -> None:
    path = rewrite(
        files["f32"],
        tmp_path / "missing.gguf",
        edit=lambda n, v, t: None if n == "blk.5.ssm_out.weight" else (v, t),
    )
    rejects(path, "missing tensor 'blk.5.ssm_out.weight'")


def test_rejects_misshaped_tensor(files: dict[str, Path], tmp_path: Path) -> None:
    def shrink(name: str, values: np.ndarray, ggml_type: int) -> tuple[np.ndarray, int]:
        return (values[:-1], ggml_type) if name == "blk.3.attn_k.weight" else (values, ggml_type)

    rejects(
        rewrite(files["f32"], tmp_path / "shape.gguf", edit=shrink),
        "'blk.3.attn_k.weight' has shape [256, 127], expected [256, 128]",
    )


def test_rejects_unexpected_tensor(files: dict[str, Path], tmp_path: Path) -> None:
    path = rewrite(
        files["f32"],
        tmp_path / "extra.gguf",
        meta={
            "qwen35.block_count": (8, gguf.GGUFValueType.UINT32),
            "qwen35.nextn_predict_layers": None,
            "qwen35.attention.recurrent_layers": None,
        },
    )
    rejects(path, "unexpected tensor 'blk.8.")


def test_rejects_unsupported_tensor_type(files: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "q4_0.gguf"
    rewrite(
        files["f32"],
        path,
        edit=lambda n, v, t: (v, quants.F16) if n == "blk.2.ffn_up.weight" else (v, t),
    )
    # patch the type id of that tensor to Q4_0 (2) in place: same size class is not needed to fail
    model = open_gguf(path)
    raw = bytearray(path.read_bytes())
    record = raw.find(b"blk.2.ffn_up.weight")
    type_pos = record + len(b"blk.2.ffn_up.weight") + 4 + 2 * 8
    assert int.from_bytes(raw[type_pos : type_pos + 4], "little") == quants.F16 and model
    raw[type_pos : type_pos + 4] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    rejects(path, "'blk.2.ffn_up.weight' has type Q4_0", "not support")


def test_rejects_truncated_file(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["q4_k_m"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    rejects(cut, "truncated file", "'blk.8.nextn.shared_head_norm.weight'")
    header_cut = tmp_path / "header-cut.gguf"
    header_cut.write_bytes(data[:5000])
    rejects(header_cut, "truncated header")


def test_rejects_garbage_empty_and_missing_files(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    rejects(garbage, "not a GGUF file")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    rejects(empty, "empty file")
    rejects(tmp_path / "absent.gguf", "no such file")
    rejects(tmp_path, "is a directory")
    wrong_version = tmp_path / "v9.gguf"
    wrong_version.write_bytes(b"GGUF" + (9).to_bytes(4, "little") + bytes(16))
    rejects(wrong_version, "unsupported GGUF version 9")
    huge_counts = tmp_path / "counts.gguf"
    huge_counts.write_bytes(
        b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + bytes(8)
    )
    rejects(huge_counts, "implausible counts")


def test_rejects_missing_or_malformed_keys(files: dict[str, Path], tmp_path: Path) -> None:
    rejects(
        rewrite(files["f32"], tmp_path / "nokey.gguf", meta={"qwen35.ssm.state_size": None}),
        "missing metadata key 'qwen35.ssm.state_size'",
    )
    as_string = {"qwen35.embedding_length": ("256", gguf.GGUFValueType.STRING)}
    rejects(
        rewrite(files["f32"], tmp_path / "str.gguf", meta=as_string),
        "'qwen35.embedding_length' should be a non-negative integer",
    )
    per_layer = {"qwen35.feed_forward_length": ([512] * 8 + [256], gguf.GGUFValueType.ARRAY)}
    rejects(rewrite(files["f32"], tmp_path / "arr.gguf", meta=per_layer), "differs between layers")
    inner = {"qwen35.ssm.inner_size": (128, gguf.GGUFValueType.UINT32)}
    rejects(rewrite(files["f32"], tmp_path / "inner.gguf", meta=inner), "ssm.inner_size 128")


def test_rejects_split_files(files: dict[str, Path], tmp_path: Path) -> None:
    split = {"split.count": (2, gguf.GGUFValueType.UINT16)}
    rejects(rewrite(files["f32"], tmp_path / "split.gguf", meta=split), "split GGUF")


def test_open_returns_model_type(files: dict[str, Path]) -> None:
    assert isinstance(open_gguf(str(files["f32"])), GGUFModel)
