"""Which attention kernels a pass launches (engine.cuda.kernels.attention_launches, given the
pass's Layout.of_rows): every row position is taken by exactly one launched kernel, whatever the
pass holds. CPU only."""

from __future__ import annotations

import itertools

import pytest

from engine.cuda.forward import Layout
from engine.cuda.kernels import ATT_POS_END, attention_launches

POSITIONS = (0, 1, 2047, 2048, 2049, 23000, ATT_POS_END - 1)


def _takers(launches: list[tuple[str, int, int]], pos: int) -> list[str]:
    return [name for name, lo, hi in launches if lo <= pos < hi]


@pytest.mark.parametrize("kernel", ["attn_decode", "attn_decode_tc"])
@pytest.mark.parametrize("core_below", [0, 2048])
def test_every_row_of_a_pass_has_one_kernel(kernel: str, core_below: int) -> None:
    for n in range(1, 4):
        for rows in itertools.combinations(POSITIONS, n):
            lay = Layout.of_rows(n, 1, 1, True, min(rows), max(rows), core_below)
            launches = attention_launches(kernel, core_below, lay.shallow, lay.deep)
            for pos in rows:
                assert len(_takers(launches, pos)) == 1, (rows, launches)


def test_rows_below_the_position_go_to_the_cuda_cores() -> None:
    launches = attention_launches("attn_decode_tc", 2048, True, True)
    assert _takers(launches, 2047) == ["attn_decode"]
    assert _takers(launches, 2048) == ["attn_decode_tc"]
    # a pass entirely on one side launches one kernel
    assert [n for n, _, _ in attention_launches("attn_decode_tc", 2048, True, False)] == ["attn_decode"]  # fmt: skip
    assert [n for n, _, _ in attention_launches("attn_decode_tc", 2048, False, True)] == ["attn_decode_tc"]  # fmt: skip
    # no split without the tensor-core kernel, or with core_below 0
    assert attention_launches("attn_decode", 2048, True, True) == [("attn_decode", 0, ATT_POS_END)]
    assert attention_launches("attn_decode_tc", 0, True, True) == [("attn_decode_tc", 0, ATT_POS_END)]  # fmt: skip
