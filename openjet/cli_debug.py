"""`openjet debug ...`: developer tools around the engine (synthetic models, tokenizer, logits).

Each command lives in its own function on `debug_app`; the engine helpers append theirs
(`tokenize`, `logits`) below `synth`. Heavy engine imports happen inside the commands so that
`openjet --help` stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

debug_app = typer.Typer(
    help="Developer tools: synthetic models, tokenizer, logits.", no_args_is_help=True
)
_err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    _err.print(f"[red]error:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    return typer.Exit(2)


@debug_app.command("synth")
def synth(
    out: Annotated[Path, typer.Option("--out", help="Output .gguf file.")],
    preset: Annotated[
        str, typer.Option("--preset", help="Model shape: tiny, small or 27b.")
    ] = "tiny",
    quant: Annotated[
        str, typer.Option("--quant", help="Quant mix: f32, f16, bf16, q8_0, q4_k_m or mixed.")
    ] = "f32",
    seed: Annotated[int, typer.Option("--seed", help="Random seed (weights and vocabulary).")] = 0,
    threads: Annotated[
        int, typer.Option("--threads", help="Worker threads (0: all cores, at most 16).")
    ] = 0,
    dequantized: Annotated[
        Path | None,
        typer.Option(
            "--dequantized-copy", help="Also write an all-F32 copy (the llama.cpp oracle)."
        ),
    ] = None,
) -> None:
    """Write a random-weight qwen35 GGUF (with MTP block) that llama.cpp loads and runs."""
    from engine.synthetic import PRESETS, QUANT_MIXES, write_dequantized_copy, write_synthetic

    if preset not in PRESETS:
        raise _fail(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    if quant not in QUANT_MIXES:
        raise _fail(f"unknown quant mix {quant!r}; choose from {', '.join(QUANT_MIXES)}")
    start = time.perf_counter()
    try:
        path = write_synthetic(out, preset, quant, seed, threads=threads or None)
        if dequantized is not None:
            write_dequantized_copy(path, dequantized)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc}") from exc
    except ValueError as exc:  # GGUFError from the dequantized copy, bad dimensions
        raise _fail(str(exc)) from exc
    size = path.stat().st_size
    typer.echo(f"{path}  {size / 2**20:.1f} MiB  {time.perf_counter() - start:.1f} s")


def _token_ids(text: str) -> list[int]:
    """Parse '1,2,3' into token ids, or fail with a message that names the bad entry."""
    ids = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise _fail(f"--tokens must be comma-separated non-negative integers; got {part!r}")
        ids.append(int(part))
    return ids


@debug_app.command("logits")
def logits(
    model: Annotated[Path, typer.Argument(help="A qwen35 GGUF file.")],
    tokens: Annotated[str, typer.Option("--tokens", help="Token ids from position 0, e.g. 1,2,3.")],
    out: Annotated[
        Path, typer.Option("--out", help="Output .npy file: float32 [n_tokens, n_vocab].")
    ],
) -> None:
    """Run the numpy reference over one sequence and save its logits, one row per position."""
    import numpy as np

    from engine.gguf_file import GGUFError, open_gguf
    from engine.reference import ReferenceModel

    ids = _token_ids(tokens)
    try:
        reference = ReferenceModel(open_gguf(model))
    except (GGUFError, OSError) as exc:
        raise _fail(str(exc)) from exc
    try:
        rows = reference.forward(reference.new_state(), ids).logits
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    try:
        with out.open("wb") as handle:  # exactly this path (np.save(str) would append .npy)
            np.save(handle, rows)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc}") from exc
    typer.echo(f"{out}  logits {rows.shape[0]} x {rows.shape[1]} float32")


@debug_app.command("tokenize")
def tokenize(
    model: Annotated[Path, typer.Argument(help="A GGUF file with a gpt2/qwen35 tokenizer.")],
    text: Annotated[str, typer.Argument(help="The text to tokenize.")],
    no_special: Annotated[
        bool,
        typer.Option("--no-special", help="Treat control tokens such as <|im_start|> as text."),
    ] = False,
) -> None:
    """Print the token ids of TEXT, comma-separated (special tokens recognised, no BOS)."""
    from engine.gguf_file import GGUFError, open_gguf
    from engine.tokenizer import Tokenizer, TokenizerError

    try:
        tokenizer = Tokenizer.from_gguf(open_gguf(model))
    except (GGUFError, TokenizerError, OSError) as exc:
        raise _fail(str(exc)) from exc
    ids = tokenizer.encode(text, parse_special=not no_special)
    typer.echo(",".join(str(i) for i in ids))
