"""Random-weight `qwen35` GGUFs that llama.cpp loads and runs (tiny ... full 27B shape).

`write_synthetic(out, preset, quant, seed)` writes a complete model: hyperparameters for the
`qwen35` architecture, a real byte-level BPE vocabulary with merges and the Qwen special tokens
(`engine.synthetic_vocab`), the Qwen3.5-style chat template, every trunk tensor and the MTP
(nextn) block (spec sections 2, 3). Tensors are streamed to disk one chunk at a time with the
`gguf` package's GGUFWriter, so memory stays bounded for the 27B shape.

Quant mixes: `f32`, `f16`, `bf16`, `q8_0`, `q4_k_m` (llama.cpp's Q4_K_M recipe, spec 3.6) and
`mixed` (an Unsloth-"UD"-style mix that uses every supported type). In every mix norms, `ssm_a`,
`ssm_dt.bias` and `ssm_conv1d` stay F32, as llama.cpp's converter and quantizer keep them.

`write_dequantized_copy(src, dst)` rewrites a file with every tensor dequantized to F32 and the
same metadata: the oracle for comparing against llama.cpp on quantized models.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import gguf
import numpy as np

from engine import quants
from engine.synthetic_plan import PRESETS, SyntheticPreset, tensor_specs, tensor_type
from engine.synthetic_weights import WeightSpec, make_chunk, n_chunks

__all__ = [
    "PRESETS",
    "QUANT_MIXES",
    "SyntheticPreset",
    "write_dequantized_copy",
    "write_skeleton",
    "write_synthetic",
]

# quant mix -> llama_ftype written as general.file_type
QUANT_MIXES: dict[str, int] = {"f32": 0, "f16": 1, "q8_0": 7, "q4_k_m": 15, "bf16": 32, "mixed": 15}

ARCH = "qwen35"


def _preset(name: str) -> SyntheticPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (choose from {', '.join(PRESETS)})")
    return PRESETS[name]


def _add_hparams(writer: gguf.GGUFWriter, p: SyntheticPreset, quant: str) -> None:
    key = f"{ARCH}."
    writer.add_string("general.name", f"openjet-synthetic-{p.name}-{quant}")
    writer.add_uint32("general.file_type", QUANT_MIXES[quant])
    writer.add_uint32("general.quantization_version", 2)
    writer.add_uint32(key + "context_length", p.context_length)
    writer.add_uint32(key + "embedding_length", p.n_embd)
    writer.add_uint32(key + "block_count", p.n_layer + p.n_nextn)
    writer.add_uint32(key + "nextn_predict_layers", p.n_nextn)
    writer.add_uint32(key + "feed_forward_length", p.n_ff)
    writer.add_uint32(key + "attention.head_count", p.n_head)
    writer.add_uint32(key + "attention.head_count_kv", p.n_head_kv)
    writer.add_uint32(key + "attention.key_length", p.head_dim)
    writer.add_uint32(key + "attention.value_length", p.head_dim)
    writer.add_float32(key + "attention.layer_norm_rms_epsilon", p.rms_eps)
    writer.add_array(key + "attention.recurrent_layers", list(p.recurrent) + [False] * p.n_nextn)
    writer.add_uint32(key + "full_attention_interval", p.full_attention_interval)
    writer.add_uint32(key + "rope.dimension_count", p.rope_n_rot)
    writer.add_array(key + "rope.dimension_sections", list(p.rope_sections))
    writer.add_float32(key + "rope.freq_base", p.rope_freq_base)
    writer.add_uint32(key + "ssm.conv_kernel", p.ssm_conv_kernel)
    writer.add_uint32(key + "ssm.inner_size", p.ssm_n_v_heads * p.ssm_d_state)
    writer.add_uint32(key + "ssm.state_size", p.ssm_d_state)
    writer.add_uint32(key + "ssm.time_step_rank", p.ssm_n_v_heads)
    writer.add_uint32(key + "ssm.group_count", p.ssm_n_k_heads)


def _add_tokenizer(writer: gguf.GGUFWriter, n_vocab: int, seed: int) -> None:
    from engine.synthetic_vocab import build_vocab, chat_template_text

    vocab = build_vocab(n_vocab, seed)
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "qwen35")
    writer.add_array("tokenizer.ggml.tokens", vocab.tokens)
    writer.add_array("tokenizer.ggml.token_type", vocab.token_types)
    writer.add_array("tokenizer.ggml.merges", vocab.merges)
    writer.add_uint32("tokenizer.ggml.eos_token_id", vocab.eos_id)
    writer.add_uint32("tokenizer.ggml.padding_token_id", vocab.pad_id)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_string("tokenizer.chat_template", chat_template_text())


def _tensor_bytes(spec: WeightSpec, ggml_type: int) -> int:
    return quants.tensor_bytes(ggml_type, (spec.rows, spec.cols))


def _add_tensor_info(writer: gguf.GGUFWriter, spec: WeightSpec, ggml_type: int) -> None:
    # declared as raw bytes of the ggml type: GGUFWriter turns the byte shape back into
    # the element shape (this works for F32/F16/BF16 as for the block formats)
    byte_shape = (*spec.shape[:-1], quants.row_bytes(ggml_type, spec.cols))
    raw_type = gguf.GGMLQuantizationType(ggml_type)
    nbytes = _tensor_bytes(spec, ggml_type)
    writer.add_tensor_info(spec.name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=raw_type)


def _tensor_chunks(
    spec: WeightSpec,
    ggml_type: int,
    seed: int,
    index: int,
    blocks: bool,
    pool: ThreadPoolExecutor,
    window: int,
) -> Iterator[np.ndarray]:
    """The tensor's bytes in order, computed in parallel `window` chunks at a time."""
    total = n_chunks(spec)
    for start in range(0, total, window):
        batch = range(start, min(total, start + window))
        yield from pool.map(lambda c: make_chunk(spec, ggml_type, seed, index, c, blocks), batch)


def _write_tensor_data(writer: gguf.GGUFWriter, chunks: Iterator[np.ndarray], nbytes: int) -> None:
    """Like GGUFWriter.write_tensor_data, but from a sequence of chunks (bounded memory)."""
    assert writer.fout is not None
    fout = writer.fout[0]
    writer.write_padding(fout, fout.tell())
    # keep the writer's own bookkeeping (it pops one tensor info per written tensor)
    first = next(iter(writer.tensors[0]))
    info = writer.tensors[0].pop(first)
    assert info.nbytes == nbytes, (first, info.nbytes, nbytes)
    written = 0
    for chunk in chunks:
        fout.write(np.ascontiguousarray(chunk).data)
        written += chunk.nbytes
    if written != nbytes:
        raise RuntimeError(f"tensor {first}: wrote {written} bytes, expected {nbytes}")
    writer.write_padding(fout, nbytes)


def _prepare(
    out: Path, preset: str, quant: str, seed: int
) -> tuple[gguf.GGUFWriter, list[WeightSpec], list[int], SyntheticPreset]:
    """A writer with metadata and tensor index declared, its output file not yet opened."""
    p = _preset(preset)
    if quant not in QUANT_MIXES:
        raise ValueError(f"unknown quant mix {quant!r} (choose from {', '.join(QUANT_MIXES)})")
    specs = tensor_specs(p)
    types = [tensor_type(spec, p, quant) for spec in specs]
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(_partial(out), ARCH)
    _add_hparams(writer, p, quant)
    _add_tokenizer(writer, p.n_vocab, seed)
    for spec, ggml_type in zip(specs, types, strict=True):
        _add_tensor_info(writer, spec, ggml_type)
    return writer, specs, types, p


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


@contextmanager
def _published(writer: gguf.GGUFWriter, out: Path) -> Iterator[None]:
    """The body writes `writer`'s file (out + ".partial"); it becomes `out` only once complete
    (an atomic rename), and is removed if anything fails."""
    try:
        yield
        writer.close()
        _partial(out).replace(out)
    finally:
        writer.close()
        _partial(out).unlink(missing_ok=True)


def _write_header(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()


def write_synthetic(
    out: Path, preset: str, quant: str, seed: int, threads: int | None = None
) -> Path:
    """Write a random-weight qwen35 GGUF; returns the path. Deterministic in (preset, quant, seed)."""
    out = Path(out)
    writer, specs, types, p = _prepare(out, preset, quant, seed)
    workers = threads or min(16, os.cpu_count() or 1)
    with _published(writer, out):
        _write_header(writer)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for index, (spec, ggml_type) in enumerate(zip(specs, types, strict=True)):
                chunks = _tensor_chunks(
                    spec, ggml_type, seed, index, p.random_blocks, pool, workers
                )
                _write_tensor_data(writer, chunks, _tensor_bytes(spec, ggml_type))
    return out


def write_skeleton(out: Path, preset: str, quant: str, seed: int = 0) -> Path:
    """The same file as `write_synthetic` but with all tensor bytes zero, left as a sparse hole:
    a full-size, valid GGUF in seconds and almost no disk space (tests of opening and planning)."""
    out = Path(out)
    writer, specs, types, _ = _prepare(out, preset, quant, seed)
    with _published(writer, out):
        _write_header(writer)
        assert writer.fout is not None
        fout = writer.fout[0]
        writer.write_padding(fout, fout.tell())
        data_size = sum(
            -(-_tensor_bytes(s, t) // writer.data_alignment) * writer.data_alignment
            for s, t in zip(specs, types, strict=True)
        )
        fout.truncate(fout.tell() + data_size)
    return out


_NOT_COPIED = ("general.architecture", "general.alignment", "general.file_type")


def write_dequantized_copy(src: Path, dst: Path) -> Path:
    """Copy `src` with every tensor dequantized to F32 (same metadata, same tensor order)."""
    from engine.gguf_file import open_gguf

    model = open_gguf(src)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(_partial(dst), ARCH)
    for key, item in model.header.metadata.items():
        if key in _NOT_COPIED:
            continue
        value = item.value
        value = (
            value.tolist()
            if isinstance(value, np.ndarray)
            else list(value)
            if item.subtype is not None
            else value
        )
        sub = gguf.GGUFValueType(item.subtype) if item.subtype is not None else None
        writer.add_key_value(key, value, gguf.GGUFValueType(item.vtype), sub_type=sub)
    writer.add_uint32("general.file_type", QUANT_MIXES["f32"])
    for info in model.tensors.values():
        shape = tuple(reversed(info.shape))
        writer.add_tensor_info(info.name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
    with _published(writer, dst):
        _write_header(writer)
        for name in model.tensors:
            writer.write_tensor_data(model.dequantize(name))
    return dst
