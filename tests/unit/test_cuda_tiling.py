"""Which product kernel `MatmulConfig.row_tile` picks (no GPU needed): the deep single-n-tile
kernel only for narrow products whose grid fits in one wave at its occupancy, the plain one
otherwise, the tiled kernel for many rows, and the packed-activation names."""

from __future__ import annotations

import pytest

from engine.cuda.build import MatmulConfig
from engine.cuda.weights import Q4_K, Q6_K

H200_SMS, RTX3090_SMS = 132, 82


def test_narrow_products_get_the_deep_kernel_where_their_grid_fits_one_wave() -> None:
    cfg = MatmulConfig()
    # 5,120 features = 320 CTAs: one wave at 3 CTAs/SM on 132 SMs, not on 82
    assert cfg.row_tile(Q6_K, 1, True, 5120, H200_SMS).name == "mmh1_q6_k_1d"
    assert cfg.row_tile(Q6_K, 1, True, 5120, RTX3090_SMS).name == "mmh1_q6_k_1"
    assert cfg.row_tile(Q4_K, 8, False, 5120, H200_SMS).name == "mm_q4_k_1d"
    # wide products keep 4 CTAs/SM
    assert cfg.row_tile(Q4_K, 1, True, 34816, H200_SMS).name == "mmh1_q4_k_1"
    # more than one n-tile, or many rows: the deep variant does not exist there
    assert cfg.row_tile(Q4_K, 9, True, 5120, H200_SMS).name == "mmh_q4_k_2f"
    assert cfg.row_tile(Q4_K, 13, True, 5120, H200_SMS).name == "mmh_q4_k_2"
    assert cfg.row_tile(Q4_K, 512, True, 5120, H200_SMS).name == "mmg8h_q4_k"
    assert cfg.row_tile(Q4_K, 512, False, 5120, H200_SMS).name == "mmg8_q4_k"


def test_deep_kernels_can_be_switched_off_and_need_the_shape() -> None:
    assert (
        MatmulConfig(deep_narrow=False).row_tile(Q6_K, 1, True, 5120, H200_SMS).name
        == "mmh1_q6_k_1"
    )
    assert MatmulConfig().row_tile(Q6_K, 1, True).name == "mmh1_q6_k_1"  # no shape given


def test_all_single_tile_products_can_run_deep() -> None:
    cfg = MatmulConfig(deep_all=True)
    assert cfg.row_tile(Q4_K, 1, True, 34816, H200_SMS).name == "mmh1_q4_k_1d"
    assert cfg.row_tile(Q4_K, 9, True, 34816, H200_SMS).name == "mmh_q4_k_2f"


def test_deep_kernels_can_be_kept_to_some_formats() -> None:
    cfg = MatmulConfig(deep_types=(Q6_K,))
    assert cfg.row_tile(Q6_K, 1, True, 5120, H200_SMS).name == "mmh1_q6_k_1d"
    assert cfg.row_tile(Q4_K, 1, True, 5120, H200_SMS).name == "mmh1_q4_k_1"
    # a pair runs deep only where both of its formats may
    assert cfg.pair_tile((Q4_K, Q6_K), 1, 5120, H200_SMS).name == "mmp1_q4_k_q6_k_1"
    assert MatmulConfig().pair_tile((Q4_K, Q6_K), 1, 5120, H200_SMS).name == "mmp1_q4_k_q6_k_1d"
    every_q6k = MatmulConfig(deep_all=True, deep_types=(Q6_K,))
    assert every_q6k.row_tile(Q6_K, 1, True, 248320, H200_SMS).name == "mmh1_q6_k_1d"
    assert every_q6k.row_tile(Q4_K, 1, True, 34816, H200_SMS).name == "mmh1_q4_k_1"


def test_packed_kernels_follow_the_row_groups_of_the_activations() -> None:
    """Packed activations come in groups of 1, 4 or 8 rows by the pass's row count
    (kernels.packed_group); each row count gets the kernel compiled for its group (that every
    such name is a kernel of matmul.cu: tests/unit/test_cuda_compile.py)."""
    from engine.cuda import kernels

    cfg = MatmulConfig()
    prefixes = {0: "mmh1_", 2: "mmh4_", 3: "mmh_"}
    for rows in (1, 2, 3, 4, 5, 8, 9, 32, 127, 128, 512):
        group = kernels.packed_group(rows)
        assert kernels.packed_rows(rows) % (1 << group) == 0
        assert 0 <= kernels.packed_rows(rows) - rows < (1 << group)
        for n_out in (5120, 34816):
            for gtype in (Q4_K, Q6_K):
                name = cfg.row_tile(gtype, rows, True, n_out, H200_SMS).name
                assert name.startswith(prefixes[group] if rows < 128 else "mmg8h_"), (rows, name)
                assert cfg.row_tile(gtype, rows, False, n_out, H200_SMS).name.startswith(
                    "mm_" if rows < 128 else "mmg8_"
                )


def test_max_nt_sends_more_rows_to_row_groups_of_narrower_kernels() -> None:
    """max_nt caps the n-tiles per CTA: 12 rows run as two row groups of the single-n-tile
    kernel (8 rows each, grid x = 2) instead of one two-n-tile CTA per weight tile."""
    assert MatmulConfig().row_tile(Q4_K, 12, True, 34816, H200_SMS).name == "mmh_q4_k_2f"
    tile = MatmulConfig(max_nt=1).row_tile(Q4_K, 12, True, 34816, H200_SMS)
    assert (tile.name, tile.rows_per_group) == ("mmh_q4_k_1", 8)
    assert MatmulConfig(max_nt=2).row_tile(Q6_K, 20, True, 5120, H200_SMS).name == "mmh_q6_k_2"


def test_passes_of_few_rows_get_one_m_tile_per_warp() -> None:
    """9 to few_rows rows (two n-tiles, the second part empty) run the `_2f` kernels, one 16-row
    m-tile per warp (twice the CTAs of `_2`); more rows, or few_rows 0, the `_2` kernels."""
    cfg = MatmulConfig()
    for rows in (9, 12):
        tile = cfg.row_tile(Q4_K, rows, True, 34816, H200_SMS)
        assert (tile.name, tile.rows_per_cta) == ("mmh_q4_k_2f", 16 * cfg.mt_few)
    for rows, few in ((13, 12), (16, 12), (12, 0)):
        tile = MatmulConfig(few_rows=few).row_tile(Q4_K, rows, True, 34816, H200_SMS)
        assert (tile.name, tile.rows_per_cta) == ("mmh_q4_k_2", 16 * cfg.mt)


def test_a_pair_launch_is_tiled_as_one_weight_of_both_rows() -> None:
    """pair_tile names the kernel of two formats (lower ggml type first) with the tiling
    row_tile gives one packed weight of both weights' rows; none for prompt chunks (the tiled
    kernel), for formats without a pair kernel, or with pair_products off."""
    cfg = MatmulConfig()
    tile = cfg.pair_tile((Q4_K, Q6_K), 1, 16480, H200_SMS)
    single = cfg.row_tile(Q4_K, 1, True, 16480, H200_SMS)
    assert tile.name == "mmp1_q4_k_q6_k_1" and single.name == "mmh1_q4_k_1"
    assert (tile.rows_per_group, tile.rows_per_cta) == (single.rows_per_group, single.rows_per_cta)
    assert cfg.pair_tile((Q4_K, Q6_K), 3, 1024, H200_SMS).name == "mmp4_q4_k_q6_k_1d"
    assert cfg.pair_tile((Q4_K, Q6_K), 12, 16480, H200_SMS).name == "mmp_q4_k_q6_k_2f"
    assert cfg.pair_tile((Q4_K, Q6_K), 127, 16480, H200_SMS).name == "mmp_q4_k_q6_k_4"
    for types, rows, c in (((Q4_K, Q6_K), 128, cfg), ((Q6_K, Q4_K), 1, cfg),
                           ((Q4_K, Q6_K), 1, MatmulConfig(pair_products=False))):  # fmt: skip
        with pytest.raises(ValueError, match="no pair kernel"):
            c.pair_tile(types, rows, 1024, H200_SMS)


def test_tiled_is_the_row_count_of_the_gemm_kernel() -> None:
    cfg = MatmulConfig()
    assert not cfg.tiled(cfg.gemm_min_rows - 1) and cfg.tiled(cfg.gemm_min_rows)
    assert cfg.row_tile(Q4_K, cfg.gemm_min_rows, True).name.startswith("mmg")
    assert not MatmulConfig(gemm=False).tiled(4096)
