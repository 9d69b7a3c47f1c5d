"""bench/product_kernels.py's settings: what `--configs` turns into (CPU, no GPU needed)."""

from __future__ import annotations

import pytest

from bench.product_kernels import matmul_config
from engine.cuda import build, weights


def test_default_setting_is_the_default_config() -> None:
    assert matmul_config("default") == build.MatmulConfig()


def test_fields_joined_by_plus_set_those_fields_alone() -> None:
    cfg = matmul_config("few_rows=8+mt_few=2")
    assert (cfg.few_rows, cfg.mt_few) == (8, 2)
    assert cfg.turns == build.MatmulConfig().turns


def test_few_rows_8_puts_twelve_rows_on_the_two_m_tile_kernels() -> None:
    """The setting the NOTES plan profiles: 12-row passes on `_2` instead of `_2f`."""
    n = (weights.Q4_K, 12, True, 34816, 132)
    assert build.MatmulConfig().row_tile(*n).name == "mmh_q4_k_2f"
    assert matmul_config("few_rows=8").row_tile(*n).name == "mmh_q4_k_2"


def test_a_setting_without_a_value_is_refused() -> None:
    with pytest.raises(ValueError):
        matmul_config("few_rows")
