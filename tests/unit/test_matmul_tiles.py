"""Which product kernel a launch picks (engine/cuda/build.MatmulConfig.row_tile), on the CPU:
one-row-tile kernels up to 8 rows, the narrow or wide multi-row kernels by the weight's row
count, the tiled kernel from gemm_min_rows up."""

from __future__ import annotations

from engine.cuda.build import MatmulConfig
from engine.cuda.weights import Q4_K, Q6_K


def test_kernel_choice_by_rows_and_width() -> None:
    cfg = MatmulConfig()
    assert cfg.row_tile(Q4_K, 1, 34816).name == "mm_q4_k_1"
    assert cfg.row_tile(Q4_K, 8, 5120).name == "mm_q4_k_1"
    wide = cfg.row_tile(Q4_K, 12, 34816)
    assert (wide.name, wide.rows_per_group, wide.rows_per_cta) == ("mm_q4_k_2", 16, 32)
    narrow = cfg.row_tile(Q6_K, 12, 5120)
    assert (narrow.name, narrow.rows_per_group, narrow.rows_per_cta) == ("mm_q6_k_2n", 16, 16)
    assert cfg.row_tile(Q6_K, 32, cfg.narrow_rows).name == "mm_q6_k_4n"
    assert cfg.row_tile(Q6_K, 32, cfg.narrow_rows + 16).name == "mm_q6_k_4"
    assert cfg.row_tile(Q4_K, 512, 5120).name == "mmg8_q4_k"
    assert MatmulConfig(narrow_rows=0).row_tile(Q6_K, 12, 5120).name == "mm_q6_k_2"
