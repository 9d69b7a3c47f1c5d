"""Next-token distributions from a running llama-server, and the figures that compare them.

llama-server returns, for each token it generates, the softmax over the full vocabulary when a
`/completion` request sets `n_probs` = n_vocab and `post_sampling_probs: false` (spec 11). One
sampled request of N tokens therefore yields N positions. Its probabilities are f32 values that
do not sum exactly to 1, so they are renormalized (log-softmax of the log-probabilities) before
any KL is taken.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from engine.reference_ops import log_softmax


@dataclass(frozen=True)
class Generation:
    """What llama-server produced after a prompt: the tokens and, per token, the log-distribution
    it was drawn from (row i = position len(prompt) + i − 1 of the full sequence)."""

    prompt: list[int]
    tokens: list[int]
    logprobs: np.ndarray  # float64 [len(tokens), n_vocab], renormalized

    @property
    def sequence(self) -> list[int]:
        return self.prompt + self.tokens


class Oracle:
    """Distributions and greedy tokens from one llama-server, by token ids (no text involved).

    llama-server reports a generated token's probabilities only once the text generated so far
    ends in complete UTF-8; a byte-fragment token would make it skip positions. Sampling
    therefore bans the tokens whose bytes are not valid UTF-8 on their own (`banned`). The ban is
    a logit bias inside the sampler: the reported distributions stay the raw, full ones.
    """

    def __init__(self, base_url: str, n_vocab: int, timeout: float = 300.0) -> None:
        self.base_url, self.n_vocab, self.timeout = base_url, n_vocab, timeout
        self._banned: list[int] | None = None  # asked on first use: a request changes MTP state

    @property
    def banned(self) -> list[int]:
        if self._banned is None:
            self._banned = self._fragment_tokens()
        return self._banned

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(f"{self.base_url}/completion", json=body, timeout=self.timeout)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def _fragment_tokens(self) -> list[int]:
        """Ids whose bytes are not valid UTF-8 alone (each reported entry carries its bytes)."""
        body = {"prompt": [0], "n_predict": 1, "n_probs": self.n_vocab, "temperature": 0.0}
        entries = self._post(body)["completion_probabilities"][0]["top_logprobs"]
        banned = []
        for entry in entries:
            try:
                bytes(entry["bytes"]).decode("utf-8")
            except UnicodeDecodeError:
                banned.append(int(entry["id"]))
        return sorted(banned)

    def sample(
        self,
        prompt: Sequence[int],
        n_predict: int,
        seed: int,
        *,
        cache: bool = False,
        temperature: float = 1.0,
    ) -> Generation:
        """Draw n_predict tokens after `prompt`, with the full distribution at each position.

        EOS is ignored so every request yields exactly n_predict positions; top-k/top-p/min-p are
        off so a sampled request wanders over the whole distribution.
        """
        body = {
            "prompt": list(prompt), "n_predict": n_predict, "n_probs": self.n_vocab,
            "post_sampling_probs": False, "temperature": temperature, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "seed": seed, "ignore_eos": True, "cache_prompt": cache,
            "return_tokens": True, "logit_bias": [[t, False] for t in self.banned],
        }  # fmt: skip
        result = self._post(body)
        rows, tokens = result["completion_probabilities"], [int(t) for t in result["tokens"]]
        if len(rows) != n_predict or len(tokens) != n_predict:
            raise AssertionError(
                f"llama-server returned {len(rows)} distributions and {len(tokens)} tokens, "
                f"asked for {n_predict}"
            )
        assert tokens == [int(row["id"]) for row in rows]
        return Generation(list(prompt), tokens, _dense_logprobs(rows, self.n_vocab))

    def greedy(self, prompt: Sequence[int], n_predict: int) -> list[int]:
        """Plain greedy continuation (no bans, no probabilities)."""
        body = {
            "prompt": list(prompt), "n_predict": n_predict, "temperature": 0.0,
            "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
        }  # fmt: skip
        return [int(t) for t in self._post(body)["tokens"]]

    def prompt_rows(self, prompt: Sequence[int]) -> np.ndarray:
        """The distribution at every position of `prompt`, each from llama.cpp's prefill path.

        One request per prefix length with n_predict = 1: the returned distribution is the row of
        the prefix's last token, computed in the prompt batch (on top of whatever prefix
        llama-server reuses from its cache). -> float64 [len(prompt), n_vocab].
        """
        rows = [
            self.sample(prompt[:length], 1, seed=0, cache=True, temperature=0.0).logprobs[0]
            for length in range(1, len(prompt) + 1)
        ]
        return np.stack(rows)


def _dense_logprobs(rows: list[dict[str, object]], n_vocab: int) -> np.ndarray:
    dense = np.full((len(rows), n_vocab), -np.inf)
    for i, row in enumerate(rows):
        top = row["top_logprobs"]
        assert isinstance(top, list)
        if len(top) != n_vocab:
            raise AssertionError(f"position {i}: {len(top)} probabilities, expected {n_vocab}")
        ids = np.fromiter((entry["id"] for entry in top), dtype=np.int64, count=n_vocab)
        dense[i, ids] = np.fromiter((entry["logprob"] for entry in top), dtype=np.float64)
    # A zero probability comes back as float's lowest value; any finite floor works here.
    return log_softmax(np.maximum(dense, -1e30))


@dataclass(frozen=True)
class Agreement:
    """How close a candidate's distributions are to an oracle's, over many positions."""

    positions: int
    top1: float  # fraction of positions with the same argmax
    mean_kl: float  # mean KL(oracle ‖ candidate), nats
    max_kl: float
    max_abs_logprob: float  # largest |Δ log p| over tokens with oracle p > 1e-4

    def __str__(self) -> str:
        return (
            f"{self.positions} positions: top-1 {100 * self.top1:.2f}%, mean KL {self.mean_kl:.2e}, "
            f"max KL {self.max_kl:.2e}, max |Δlog p| {self.max_abs_logprob:.2e}"
        )


def agreement(oracle_logprobs: np.ndarray, candidate_logits: np.ndarray) -> Agreement:
    """Compare rows of log-probabilities (oracle) with rows of logits (candidate)."""
    oracle = log_softmax(oracle_logprobs)
    candidate = log_softmax(candidate_logits)
    p = np.exp(oracle)
    kl = np.sum(p * (oracle - candidate), axis=-1)
    likely = p > 1e-4
    return Agreement(
        positions=int(oracle.shape[0]),
        top1=float(np.mean(oracle.argmax(axis=-1) == candidate.argmax(axis=-1))),
        mean_kl=float(kl.mean()),
        max_kl=float(kl.max()),
        max_abs_logprob=float(np.abs(oracle - candidate)[likely].max()),
    )


def merge(parts: Sequence[Agreement]) -> Agreement:
    """Pool agreements measured on disjoint sets of positions."""
    total = sum(part.positions for part in parts)
    return Agreement(
        positions=total,
        top1=sum(part.top1 * part.positions for part in parts) / total,
        mean_kl=sum(part.mean_kl * part.positions for part in parts) / total,
        max_kl=max(part.max_kl for part in parts),
        max_abs_logprob=max(part.max_abs_logprob for part in parts),
    )


DRAFT_LINE = re.compile(r"draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+) \(\s*([0-9.]+)\)")


def parse_mtp_drafts(log_text: str) -> list[list[list[tuple[int, float]]]]:
    """llama-server's MTP draft log (`--spec-type draft-mtp -lv 5`, spec 11) as
    rounds -> steps -> candidates (token id, probability over the 10 best, 3 decimals)."""
    rounds: list[list[list[tuple[int, float]]]] = []
    for match in DRAFT_LINE.finditer(log_text):
        candidate, step, token, prob = (
            int(match[1]),
            int(match[2]),
            int(match[3]),
            float(match[4]),
        )
        if step == 0 and candidate == 0:
            rounds.append([])
        if candidate == 0:
            rounds[-1].append([])
        rounds[-1][-1].append((token, prob))
    return rounds
