"""Which earlier instructions each instruction of a kernel's innermost mma loop waits for, read
from the scoreboard bits of its SASS, on a machine without a GPU.

Why: a warp's variable-latency instructions (global and shared loads, S2R, ...) count on one of
six scoreboards, and an instruction that needs a result waits until every instruction counted on
that scoreboard has finished, not only the one it needs. nvdisasm's text shows none of this; the
encoding does. Every Volta-and-later instruction is 128 bits whose top 23 hold its control
bits: stall cycles (4), yield (1), the scoreboard its result counts on (3, 7 for none), the
scoreboard counted until its sources are read (3), the scoreboards it waits for (a mask of 6) and
operand reuse (4). `DEPBAR.LE SBn, k` waits until at most k remain counted on SBn. bench/NOTES.md
v42h asked whether the first mma of a super-block waits on loads other than its own operand's.

    python bench/sass_scoreboards.py --kernels mmh_q4_k_2f
    python bench/sass_scoreboards.py --kernels mmh_q4_k_2f \\
        --stalls bench/results/2026-12-06_v42a_sass_mmh_q4_k_2f.txt
    python bench/sass_scoreboards.py --kernels mmh_q4_k_2 --set few_rows=8 --stalls sass.csv.gz

For each instruction of the loop that waits on anything, in the loop's steady state (the body
walked three times, the last reported): its offset, text, each scoreboard it waits on with the
instructions counted there (its own producers, those of other registers, and how many of those
were issued after its own), and the stall samples of that line where --stalls gives them (the
`sass.csv.gz` of a `bash bench/gpu_check.sh stalls` call, or a line table kept in results).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.product_kernels import matmul_config
from bench.sass_counts import compile_cubin, disassemble, innermost_mma_loop, parse_listing
from bench.stall_table import SAMPLES, line_reasons, number, read_text, sass_tables
from engine.cuda import build

SCOREBOARDS = 6
NONE = 7  # a barrier field's value for "no scoreboard"
_HIGH_WORD = re.compile(r"/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
_OFFSET_TEXT = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_DEPBAR = re.compile(r"DEPBAR\.LE\s+SB(\d),\s*(0x[0-9a-f]+|\d+)")
_REGISTER = re.compile(r"\bR(\d+)\b")
# a stall_table-style SASS line: address, executions, samples, source, reasons
_STALL_LINE = re.compile(r"^\s*([0-9a-f]+)\s+(\d+)\s+(\d+)\s+(.*?)\s*((?:\b\w+=\d+\s*)*)$")


@dataclass(frozen=True)
class Control:
    """An instruction's control bits (the top 23 of its 128-bit encoding)."""

    stall: int
    yield_flag: bool
    write_sb: int | None  # the scoreboard its result counts on
    read_sb: int | None  # the scoreboard counted until its sources are read
    wait_mask: int  # bit s: waits until scoreboard s is clear
    reuse: int

    @classmethod
    def from_high_word(cls, high: int) -> Control:
        bits = high >> 41
        write, read = (bits >> 5) & 7, (bits >> 8) & 7
        return cls(
            stall=bits & 15,
            yield_flag=bool((bits >> 4) & 1),
            write_sb=None if write == NONE else write,
            read_sb=None if read == NONE else read,
            wait_mask=(bits >> 11) & 63,
            reuse=(bits >> 17) & 15,
        )

    def waits_on(self) -> list[int]:
        return [s for s in range(SCOREBOARDS) if self.wait_mask >> s & 1]


@dataclass(frozen=True)
class Instruction:
    offset: int
    opcode: str
    text: str  # predicate, opcode with modifiers, operands
    control: Control

    def written(self) -> set[int]:
        """The registers of its first operand (a destination; a 64- or 128-bit load writes the
        next 1 or 3 too)."""
        first = _REGISTER.search(self.text.split(",")[0])
        if first is None:
            return set()
        name = next(t for t in self.text.split() if not t.startswith("@"))  # opcode.modifiers
        width = 4 if ".128" in name else 2 if ".64" in name else 1
        return {int(first.group(1)) + k for k in range(width)}

    def read(self) -> set[int]:
        """The registers of its sources: an m16n8k16 mma's A, B and C fragments (4, 2 and 4
        registers); otherwise each register named and the next (a 64-bit operand's pair)."""
        sources = self.text.split(",")[1:]
        widths = (4, 2, 4) if self.opcode == "HMMA" and ".16816" in self.text else (2,) * 9
        regs: set[int] = set()
        for src, width in zip(sources, widths, strict=False):
            for r in _REGISTER.findall(src):
                regs |= {int(r) + k for k in range(width)}
        return regs


@dataclass(frozen=True)
class Wait:
    """What one instruction waits for on one scoreboard: the instructions (indices) counted on
    it that must finish first, oldest first (all of them, or all but the newest k under
    `DEPBAR.LE SBn, k`)."""

    waiter: int
    scoreboard: int
    producers: tuple[int, ...]
    previous_pass: tuple[bool, ...]  # whether each producer issued in the loop's previous pass


def encoded_instructions(lines: list[str]) -> tuple[list[Instruction], range | None]:
    """A `disassemble(..., encodings=True)` listing's instructions with their control bits, and
    the innermost mma loop's body as indices into them."""
    code, labels = parse_listing(lines)
    out = []
    for listed in code:
        m = _OFFSET_TEXT.match(lines[listed.line])
        high = _HIGH_WORD.search(lines[listed.line + 1]) if listed.line + 1 < len(lines) else None
        if m is None or high is None:
            raise SystemExit(f"no encoding after: {lines[listed.line].strip()[:80]}")
        control = Control.from_high_word(int(high.group(1), 16))
        out.append(Instruction(int(m.group(1), 16), listed.opcode, m.group(2).strip(), control))
    return out, innermost_mma_loop(code, labels)


def loop_waits(code: list[Instruction], body: range, passes: int = 3) -> list[Wait]:
    """Every wait in the last of `passes` walks through the loop body (straight through: its
    forward branches taken as not taken), each scoreboard's count carried from pass to pass."""
    counted: list[list[tuple[int, int]]] = [[] for _ in range(SCOREBOARDS)]  # (index, pass)
    waits: list[Wait] = []
    for p in range(passes):
        for i in body:
            ins = code[i]
            waited = [(s, 0) for s in ins.control.waits_on()]  # (scoreboard, how many may remain)
            if m := _DEPBAR.search(ins.text):  # until at most k remain: the newest k (in order)
                waited.append((int(m.group(1)), int(m.group(2), 0)))
            for s, keep in waited:
                done = counted[s][: max(0, len(counted[s]) - keep)]
                if done and p == passes - 1:
                    waits.append(
                        Wait(i, s, tuple(j for j, _ in done), tuple(q < p for _, q in done))
                    )
                counted[s] = counted[s][len(done) :]
            for sb in (ins.control.write_sb, ins.control.read_sb):
                if sb is not None:
                    counted[sb] = [*counted[sb], (i, p)]
    return waits


def stall_samples(path: Path, kernel: str = "") -> dict[int, tuple[int, int, str]]:
    """(executions, samples, reasons) by offset from the kernel's first address: from ncu's
    source-page CSV (`sass.csv[.gz]`, as `bash bench/gpu_check.sh stalls` brings it back; the
    first profiled launch of `kernel`), or from a SASS line table as bench/results/*_sass_*.txt
    keep one kernel's (address, executions, samples, source, reason=count ...)."""
    if ".csv" in path.name:
        launches = [r for name, r in sass_tables(read_text(path)) if name.split("(")[0] == kernel]
        if not launches:
            raise SystemExit(f"{path}: no profiled launch of {kernel}")
        lines = [
            (
                int(r["Address"], 16),
                int(number(r["Instructions Executed"])),
                int(number(r[SAMPLES])),
                " ".join(f"{k}={v:.0f}" for k, v in line_reasons(r) if v),
            )
            for r in launches[0]
        ]
    else:
        matches = (_STALL_LINE.match(line) for line in path.read_text().splitlines())
        lines = [
            (int(m.group(1), 16), int(m.group(2)), int(m.group(3)), m.group(5).strip())
            for m in matches
            if m is not None
        ]
    first = lines[0][0] if lines else 0
    return {a - first: (executed, sampled, why) for a, executed, sampled, why in lines}


def describe(code: list[Instruction], wait: Wait) -> str:
    """One scoreboard's producers for a waiter: its own (writing a register it reads), others,
    and how many of the others issued after the last of its own."""
    waiter = code[wait.waiter]
    own = [j for j in wait.producers if code[j].written() & waiter.read()]
    others = [j for j in wait.producers if j not in own]
    # producers are oldest first, so "issued after own" is a later place in that tuple
    last_own = max((wait.producers.index(o) for o in own), default=len(wait.producers))
    later = [j for j in others if wait.producers.index(j) > last_own]
    kinds = sorted({code[j].opcode for j in wait.producers})
    span = f"{code[wait.producers[0]].offset:04x}-{code[wait.producers[-1]].offset:04x}"
    prev = sum(wait.previous_pass)
    return (
        f"SB{wait.scoreboard}: {len(wait.producers)} {'/'.join(kinds)} {span}"
        f" (own {len(own)}, others {len(others)}, issued after own {len(later)}"
        + (f", {prev} from the previous pass" if prev else "")
        + ")"
    )


def report(
    name: str, code: list[Instruction], body: range, samples: dict[int, tuple[int, int, str]]
) -> None:
    waits = loop_waits(code, body)
    by_waiter: dict[int, list[Wait]] = {}
    for w in waits:
        by_waiter.setdefault(w.waiter, []).append(w)
    start, end = code[body.start].offset, code[body[-1]].offset
    print(f"{name}: loop {start:04x}-{end:04x}, {len(body)} instructions")
    for i in sorted(by_waiter):
        ins = code[i]
        executed, sampled, reasons = samples.get(ins.offset, (0, 0, ""))
        tail = f"  [{sampled} samples / {executed} executions: {reasons}]" if executed else ""
        print(f"  {ins.offset:04x}  {ins.text[:52]:52}{tail}")
        for w in by_waiter[i]:
            print(f"        {describe(code, w)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(build.SOURCE_DIR / "matmul.cu"))
    parser.add_argument("--kernels", default=r"mmh_q4_k_2f", help="regex of kernel names")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--set", default="", help="MatmulConfig fields: FIELD=INT joined by +")
    parser.add_argument(
        "--stalls", type=Path, help="one kernel's stall samples: sass.csv[.gz] or a line table"
    )
    args = parser.parse_args()
    config = matmul_config(args.set or "default")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "unit.cubin"
        compile_cubin(Path(args.source), args.arch, config.defines(), cubin)
        kernels = disassemble(cubin, encodings=True)
    pattern = re.compile(args.kernels)
    names = sorted(k for k in kernels if pattern.fullmatch(k))
    if args.stalls and len(names) != 1:
        raise SystemExit(f"--stalls are one kernel's; --kernels matches {len(names)}")
    samples = stall_samples(args.stalls, names[0]) if args.stalls else {}
    for name in names:
        code, body = encoded_instructions(kernels[name])
        if body is None:
            print(f"{name}: no loop with mma")
        else:
            report(name, code, body, samples)


if __name__ == "__main__":
    main()
