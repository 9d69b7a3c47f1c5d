"""The reference on a real synthetic GGUF (tiny preset): chunking invariance in every quant mix,
peaked distributions, the MTP head, and `openjet debug logits`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.gguf_file import open_gguf
from engine.reference import ReferenceModel
from engine.reference_ops import log_softmax
from engine.synthetic import write_synthetic
from openjet.cli import app


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    return {q: write_synthetic(folder / f"tiny-{q}.gguf", "tiny", q, 5) for q in ("f32", "q4_k_m")}


@pytest.fixture(scope="module")
def tiny(tiny_files: dict[str, Path]) -> ReferenceModel:
    return ReferenceModel(open_gguf(tiny_files["f32"]))


def prompt(n: int, n_vocab: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, size=n)]


@pytest.mark.parametrize("quant", ["f32", "q4_k_m"])
def test_whole_chunked_and_single_token_prefill_agree(
    tiny_files: dict[str, Path], quant: str
) -> None:
    model = ReferenceModel(open_gguf(tiny_files[quant]))
    tokens = prompt(48, model.n_vocab)
    whole = model.forward(model.new_state(), tokens).logits
    for sizes in ([1] * 48, [32, 1, 15], [3, 45]):
        state, rows, start = model.new_state(), [], 0
        for size in sizes:
            rows.append(model.forward(state, tokens[start : start + size]).logits)
            start += size
        gap = np.abs(np.concatenate(rows) - whole).max() / np.abs(whole).max()
        print(f"{quant} chunks {sizes[:4]}…: max relative gap {gap:.2e}")
        assert gap <= 1e-4


def test_distributions_are_finite_and_peaked(tiny: ReferenceModel) -> None:
    out = tiny.forward(tiny.new_state(), prompt(200, tiny.n_vocab, seed=1))
    assert out.logits.shape == (200, tiny.n_vocab) and out.hidden.shape == (200, tiny.config.n_embd)
    top = np.exp(log_softmax(out.logits).max(axis=-1))
    print(f"mean top-1 probability {top.mean():.3f}")
    assert np.isfinite(out.logits).all() and top.mean() > 0.3
    # the hidden is normalized: its RMS over n_embd is about the norm weights' scale (≈ 1)
    rms = np.sqrt(np.mean(out.hidden.astype(np.float64) ** 2, axis=-1))
    assert 0.5 < rms.mean() < 2.0


def test_mtp_catch_up_chunked_equals_one_at_a_time(tiny: ReferenceModel) -> None:
    tokens = prompt(48, tiny.n_vocab, seed=2)
    state = tiny.new_state()
    hidden = tiny.forward(state, tokens).hidden
    whole = tiny.mtp_forward(state.copy(), tokens[1:], hidden[:-1]).logits
    single_state = state.copy()
    single = np.concatenate(
        [
            tiny.mtp_forward(single_state, [tokens[i + 1]], hidden[i : i + 1]).logits
            for i in range(47)
        ]
    )
    assert np.abs(single - whole).max() / np.abs(whole).max() <= 1e-4
    # The head predicts the trunk's next-next token often on a peaked model.
    print(f"MTP logits {whole.shape}, finite {np.isfinite(whole).all()}")
    assert np.isfinite(whole).all()


def test_debug_logits_command_writes_the_reference_rows(
    tiny_files: dict[str, Path], tiny: ReferenceModel, tmp_path: Path
) -> None:
    out = tmp_path / "rows.bin"  # any name: the file is written exactly where asked
    result = CliRunner().invoke(
        app,
        ["debug", "logits", str(tiny_files["f32"]), "--tokens", "5, 17,1999", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    rows = np.load(out)
    assert rows.dtype == np.float32 and rows.shape == (3, tiny.n_vocab)
    expected = tiny.forward(tiny.new_state(), [5, 17, 1999]).logits
    assert np.array_equal(rows, expected)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [("1,x", "comma-separated"), ("", "comma-separated"), ("4096000", "outside the vocabulary")],
)
def test_debug_logits_rejects_bad_tokens(
    tiny_files: dict[str, Path], tmp_path: Path, tokens: str, message: str
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "debug",
            "logits",
            str(tiny_files["f32"]),
            "--tokens",
            tokens,
            "--out",
            str(tmp_path / "x.npy"),
        ],
    )
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "x.npy").exists()


def test_debug_logits_rejects_a_missing_model(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    result = CliRunner().invoke(
        app, ["debug", "logits", str(missing), "--tokens", "1", "--out", str(tmp_path / "x.npy")]
    )
    assert result.exit_code == 2 and "absent.gguf" in result.output
