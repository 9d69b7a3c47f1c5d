"""Instructions per super-block of the product kernels, from their SASS, on a machine without a
GPU: nvcc compiles a CUDA source (the engine's matmul.cu, or a probe next to the benchmarks) to a
cubin, nvdisasm (the `nvidia-cuda-nvdisasm` wheel of the dev extras) lists each kernel's machine
code, and the loop that holds a kernel's mma instructions is counted by opcode.

Why: the one-row Q4_K kernel is bound by its instruction issue, not by its loads (bench/NOTES.md
v31a: without its weight loads it runs as long as with them; without its dequantization it reads
a 2 GB matrix at 4.14 TB/s instead of 3.07). At the H200's read rate an SM sub-partition has about
550 cycles per super-block of one warp's 16 rows (2,304 bytes), and issues one instruction per
cycle, so a design's instructions per super-block bound its rate before any device time is spent.

    python bench/sass_counts.py                          # matmul.cu's one-row Q4_K kernels
    python bench/sass_counts.py --source bench/tma_probe.cu --kernels 'rows_abl_.*'
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.cuda import build

HMMA_PER_SUPERBLOCK = 16  # mma chunks of one 256-element super-block per (m-tile, n-tile)
MMA_OPCODES = ("HMMA", "IMMA")  # tensor-core mma: f16 (the engine's), integer (probes)
_FUNCTION = re.compile(r"^\s*\.text\.(\w+):\s*$")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")
# an instruction's optional predicate, then its opcode (the modifiers after it not captured)
_OPCODE = r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)"
# "/*0a40*/  @!P0 BRA `(.L_x_12) ;" -> opcode (without modifiers), operands
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+" + _OPCODE + r"\S*\s*([^;]*);")
_SOURCE_OPCODE = re.compile(r"\s*" + _OPCODE)


def opcode(source: str) -> str:
    """The opcode of one SASS instruction's text without its predicate and modifiers
    ("@!P0 LDG.E.64 R2, [R4.64]" -> LDG; "?" where there is none)."""
    m = _SOURCE_OPCODE.match(source)
    return m.group(1) if m else "?"


_TARGET = re.compile(r"\((\.L_x_\d+)\)")


@dataclass(frozen=True)
class LoopCount:
    """A kernel's innermost loop that holds mma instructions: opcodes (without modifiers) and
    how many times each occurs in one pass of the loop body."""

    opcodes: Counter[str]

    @property
    def total(self) -> int:
        return sum(self.opcodes.values())

    @property
    def mma(self) -> int:
        return sum(self.opcodes[op] for op in MMA_OPCODES)

    def per_superblock(self, mma_per_superblock: int = HMMA_PER_SUPERBLOCK) -> float:
        """Instructions per super-block, given how many mma one super-block takes (16 per
        (m-tile, n-tile) pair of a warp; more where a design adds mma of its own)."""
        blocks = self.mma / mma_per_superblock
        return self.total / blocks if blocks else float("nan")


def find_nvdisasm() -> str:
    """nvdisasm from PATH, or from the nvidia-cuda-nvdisasm wheel installed in this environment."""
    if found := shutil.which("nvdisasm"):
        return found
    purelib = Path(sysconfig.get_paths()["purelib"])
    for candidate in sorted(purelib.glob("nvidia/*/bin/nvdisasm")):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise SystemExit(
        "nvdisasm not found: pip install nvidia-cuda-nvdisasm (the dev extras have it)"
    )


def compile_cubin(source: Path, arch: int, defines: tuple[str, ...], out: Path) -> None:
    """nvcc of source (its local includes inlined, as the engine's build does) to a cubin."""
    text = build.inline_includes(source.read_text())
    unit = out.with_suffix(".cu")
    unit.write_text(text)
    cmd = ["nvcc", f"-arch=sm_{arch}", "--cubin", "-std=c++17", *defines, str(unit), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed:\n{done.stderr[-4000:]}")


def disassemble(cubin: Path, encodings: bool = False) -> dict[str, list[str]]:
    """nvdisasm's listing of every kernel in cubin, by kernel name; encodings: each instruction
    line followed by a line with the high 64 bits of its encoding (nvdisasm -hex)."""
    flags = ["-c", "-hex"] if encodings else ["-c"]
    listing = subprocess.run(
        [find_nvdisasm(), *flags, str(cubin)], capture_output=True, text=True, check=True
    ).stdout
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            current = kernels.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return kernels


@dataclass(frozen=True)
class Listed:
    """One instruction of a kernel listing: opcode (without modifiers), operands, and the index
    of its line in the listing."""

    opcode: str
    operands: str
    line: int


def parse_listing(lines: list[str]) -> tuple[list[Listed], dict[str, int]]:
    """A kernel listing's instructions in order, and each label's index among them."""
    labels: dict[str, int] = {}
    code: list[Listed] = []
    for n, line in enumerate(lines):
        if m := _LABEL.match(line):
            labels[m.group(1)] = len(code)
        elif m := _INSTRUCTION.match(line):
            code.append(Listed(m.group(1), m.group(2), n))
    return code, labels


def innermost_mma_loop(code: list[Listed], labels: dict[str, int]) -> range | None:
    """Of a listing's loops (a label, then a later branch back to it) that contain mma
    instructions (MMA_OPCODES), the innermost (the shortest), as indices into code."""
    best: range | None = None
    for end, ins in enumerate(code):
        target = _TARGET.search(ins.operands) if ins.opcode == "BRA" else None
        start = labels.get(target.group(1), end + 1) if target else end + 1
        body = range(start, end + 1)  # empty for a forward branch
        if any(code[i].opcode in MMA_OPCODES for i in body) and (
            best is None or len(body) < len(best)
        ):
            best = body
    return best


def mma_loop(lines: list[str]) -> LoopCount | None:
    """The opcodes of a kernel listing's innermost loop with mma instructions; None if none."""
    code, labels = parse_listing(lines)
    body = innermost_mma_loop(code, labels)
    return None if body is None else LoopCount(Counter(code[i].opcode for i in body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(build.SOURCE_DIR / "matmul.cu"))
    parser.add_argument("--kernels", default=r"mmh1_q4_k_1d?", help="regex of kernel names")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument(
        "--mma-per-sb",
        type=int,
        default=HMMA_PER_SUPERBLOCK,
        help="mma per super-block (16 per (m-tile, n-tile) pair of a warp, more where a design "
        "adds its own, e.g. 32 for a second m16n8k16 chain, 48 for two m16n8k8 per chunk)",
    )
    args = parser.parse_args()
    pattern = re.compile(args.kernels)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "unit.cubin"
        compile_cubin(Path(args.source), args.arch, build.MATMUL_CONFIG.defines(), cubin)
        kernels = disassemble(cubin)
    for name in sorted(k for k in kernels if pattern.fullmatch(k)):
        loop = mma_loop(kernels[name])
        if loop is None:
            print(f"{name}: no loop with mma")
            continue
        top = ", ".join(f"{op} {n}" for op, n in loop.opcodes.most_common(8))
        print(
            f"{name}: {loop.total} instructions in the loop, {loop.mma} mma: "
            f"{loop.per_superblock(args.mma_per_sb):.0f} per super-block ({top})"
        )


if __name__ == "__main__":
    main()
