"""Summarise an Nsight Compute stall profile (bench/gpu_check.sh stalls): per profiled launch,
the average cycles a warp waits per issued instruction for each stall reason, then the sampled
stalls by opcode (which instructions the warps wait at, and why) and the SASS lines that hold
the most samples.

    python bench/stall_table.py stalls.csv [sass.csv[.gz]]

stalls.csv: `ncu -i REP --page raw --csv --metrics ...` (one row per launch); sass.csv:
`ncu -i REP --page source --csv --print-source sass` (a table per launch, each after a
"Kernel Name" line). Runs on the CPU too, on the files a device call brought back.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ncu_raw_rows
from bench.sass_counts import opcode

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
SAMPLES = "Warp Stall Sampling (All Samples)"
TOP_LINES = 12
TOP_OPCODES = 8


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_text(path: Path) -> str:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode(errors="replace")
    return path.read_text(errors="replace")


def kernel_stalls(raw_csv: str) -> list[tuple[str, str, list[tuple[str, float]]]]:
    """(kernel name, duration with its unit, [(reason, cycles per issued instruction)] largest
    first) per launch."""
    units, launches = ncu_raw_rows(raw_csv.splitlines())
    unit = units.get("gpu__time_duration.sum", "")
    out = []
    for rec in launches:
        reasons = [
            (k[len(STALL_PREFIX) : -len(STALL_SUFFIX)], number(v))
            for k, v in rec.items()
            if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX)
        ]
        reasons.sort(key=lambda kv: -kv[1])
        duration = f"{rec.get('gpu__time_duration.sum', '?')} {unit}".strip()
        out.append((rec["Kernel Name"], duration, reasons))
    return out


def sass_tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """The source page's tables: (kernel name, rows as dicts), one per launch."""
    tables: list[tuple[str, list[dict[str, str]]]] = []
    names: list[str] = []
    kernel = ""
    for cells in csv.reader(io.StringIO(text)):
        if cells[:1] == ["Kernel Name"]:
            kernel, names = (cells[1] if len(cells) > 1 else ""), []
        elif SAMPLES in cells:
            names = cells
            tables.append((kernel, []))
        elif names and len(cells) == len(names):
            tables[-1][1].append(dict(zip(names, cells, strict=True)))
    # ncu's page prints each launch twice, one after the other
    return [t for i, t in enumerate(tables) if i == 0 or t != tables[i - 1]]


def reason_columns(row: dict[str, str]) -> list[str]:
    return [k for k in row if k.startswith("stall_") and "Not Issued" not in k]


def line_reasons(row: dict[str, str]) -> list[tuple[str, float]]:
    """One SASS line's sampled stalls by reason (without the "stall_" prefix), largest first."""
    return sorted(
        ((k[len("stall_") :], number(row[k])) for k in reason_columns(row)),
        key=lambda kv: (kv[1], kv[0]),
        reverse=True,
    )


def by_opcode(rows: list[dict[str, str]]) -> list[tuple[str, int, Counter[str]]]:
    """(opcode, instructions executed, samples by stall reason) largest share first."""
    if not rows:
        return []
    reasons = reason_columns(rows[0])
    stalls: defaultdict[str, Counter[str]] = defaultdict(Counter)
    executed: Counter[str] = Counter()
    for r in rows:
        op = opcode(r.get("Source", ""))
        executed[op] += int(number(r.get("Instructions Executed", "0")))
        for k in reasons:
            stalls[op][k[len("stall_") :]] += int(number(r[k]))
    ranked = sorted(stalls, key=lambda op: -sum(stalls[op].values()))
    return [(op, executed[op], stalls[op]) for op in ranked]


def print_sass(kernel: str, rows: list[dict[str, str]]) -> None:
    ops = by_opcode(rows)
    total = sum(sum(c.values()) for _, _, c in ops) or 1
    print(f"\nsass {kernel}: {len(rows)} instructions, {total} samples")
    for op, executed, c in ops[:TOP_OPCODES]:
        share = 100 * sum(c.values()) / total
        why = " ".join(f"{k} {100 * v / total:.1f}" for k, v in c.most_common(3) if v)
        print(f"  {op:8} {share:5.1f}%  executed {executed:>9}  {why}")
    for r in sorted(rows, key=lambda r: -number(r[SAMPLES]))[:TOP_LINES]:
        share = 100 * number(r[SAMPLES]) / total
        why = " ".join(f"{k} {v:.0f}" for k, v in line_reasons(r)[:2] if v)
        print(
            f"  {share:5.1f}%  {r.get('Address', '')[-6:]}  {r.get('Source', '').strip()[:58]:58}  {why}"
        )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for name, duration, reasons in kernel_stalls(read_text(Path(argv[0]))):
        total = sum(v for _, v in reasons)
        print(f"kernel {name[:60]}  {duration}  {total:.2f} cycles per issued instruction")
        print("  " + "  ".join(f"{k} {v:.2f}" for k, v in reasons if v >= 0.05))
    if len(argv) > 1:
        for kernel, rows in sass_tables(read_text(Path(argv[1]))):
            print_sass(kernel, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
