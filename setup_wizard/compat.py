"""Is a GGUF file one OpenJet's engine can serve, and what does a near miss lose?

Levels: "full" (qwen35, every tensor type supported, MTP head present), "partial" (the engine
runs it but something is lost, e.g. no MTP head means no MTP drafting), "llama-server" (only the
fallback can run it: another architecture, or tensor types the engine lacks) and "unusable"
(not a readable GGUF at all).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

Level = Literal["full", "partial", "llama-server", "unusable"]


@dataclass(frozen=True)
class Compatibility:
    level: Level
    architecture: str | None
    tensor_types: dict[str, int]  # type name -> tensor count
    losses: list[str] = field(default_factory=list)  # what a partial / fallback-only file loses
    problem: str | None = None  # why it is not "full"
    context_length: int | None = None
    kv_bytes_per_token: int | None = None  # attention KV in q8_0, for fitting the context

    @property
    def engine_can_run(self) -> bool:
        return self.level in ("full", "partial")

    def summary(self) -> str:
        types = ", ".join(f"{name} x{count}" for name, count in sorted(self.tensor_types.items()))
        head = f"{self.architecture or 'unknown architecture'}; tensors: {types or 'none'}"
        if self.level == "full":
            return f"compatible ({head}; MTP head present)"
        return f"{self.level}: {self.problem} ({head})"


def _read_header(path: Path) -> Any:
    from engine.gguf_header import parse_header

    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    return parse_header(memoryview(mapped.data))


def _type_names(header: Any) -> Counter[str]:
    import gguf

    counts: Counter[str] = Counter()
    for record in header.tensors:
        try:
            counts[gguf.GGMLQuantizationType(record.ggml_type).name] += 1
        except ValueError:
            counts[f"type{record.ggml_type}"] += 1
    return counts


def kv_bytes_per_token(config: Any) -> int:
    """Attention KV bytes per token in q8_0 (34 bytes per 32 values) over the attention layers."""
    attention_layers = sum(1 for recurrent in config.recurrent if not recurrent)
    values = attention_layers * config.n_head_kv * config.head_dim * 2  # K and V
    return values * 34 // 32


def check_model(path: Path) -> Compatibility:
    """Classify `path`; never raises for a bad file (the problem is in the result)."""
    from engine import quants
    from engine.gguf_file import GGUFError, open_gguf

    try:
        header = _read_header(path)
    except Exception as exc:  # not a GGUF, truncated header, unreadable
        return Compatibility("unusable", None, {}, problem=f"not a readable GGUF file: {exc}")
    arch_value = header.metadata.get("general.architecture")
    arch = str(arch_value.value) if arch_value is not None else None
    types = _type_names(header)
    if arch != "qwen35":
        return Compatibility(
            "llama-server", arch, dict(types),
            losses=["the OpenJet engine (batched multi-agent decoding, MTP drafting)"],
            problem=f"architecture {arch!r} is not qwen35; only llama-server can try to run it",
        )  # fmt: skip
    supported = {fmt.name for fmt in quants.FORMATS.values()}
    unsupported = sorted(name for name in types if name not in supported)
    if unsupported:
        return Compatibility(
            "llama-server", arch, dict(types),
            losses=["the OpenJet engine: it has no kernels for " + ", ".join(unsupported)],
            problem=f"tensor types {', '.join(unsupported)} are not supported by the engine "
            f"(it supports {', '.join(sorted(supported))})",
        )  # fmt: skip
    try:
        model = open_gguf(path)
    except GGUFError as exc:
        return Compatibility("unusable", arch, dict(types), problem=str(exc))
    config = model.config
    kv = kv_bytes_per_token(config)
    if config.n_nextn == 0:
        return Compatibility(
            "partial", arch, dict(types),
            losses=["MTP speculative drafting (prompt-lookup drafting still works)"],
            problem="no MTP head (nextn tensors) in the file",
            context_length=config.context_length, kv_bytes_per_token=kv,
        )  # fmt: skip
    return Compatibility(
        "full", arch, dict(types), context_length=config.context_length, kv_bytes_per_token=kv
    )
