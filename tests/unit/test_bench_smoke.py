"""The device benchmarks run end to end on the CPU (--smoke: tiny model, numpy reference backend,
CPU llama.cpp build), so a device call spends its minutes measuring, not debugging; and the
llama.cpp provisioning adds the benchmark tools to a finished server build.

The smoke runs are real: `bench/parallel.py` starts OpenJet's server and llama-server as
subprocesses and drives them with streaming HTTP clients; `bench/vs_llamacpp.py` runs llama-bench
and llama-batched-bench beside the reference backend. Their numbers are not checked (a shared
CPU), only that every measurement produced one, and that cache reuse and forced acceptance did
what the figures claim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import llama_server as ls
from tests.conftest import REAL_CACHE_DIR
from tests.integration.test_llama_server import write_fake_sdist

ROOT = Path(__file__).resolve().parents[2]


def run_smoke(script: str, tmp_path: Path) -> dict[str, Any]:
    if ls.missing_build_tools():
        pytest.skip("cannot build llama.cpp here: " + "; ".join(ls.missing_build_tools()))
    out = tmp_path / f"{script}.json"
    command = [sys.executable, str(ROOT / "bench" / f"{script}.py"), "--smoke"]
    command += ["--cache", str(REAL_CACHE_DIR), "--json", str(out)]
    env = {**os.environ, "OUT": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return dict(json.loads(out.read_text()))


@pytest.mark.slow
def test_vs_llamacpp_smoke_measures_both_sides(tmp_path: Path) -> None:
    info = run_smoke("vs_llamacpp", tmp_path)
    ours, llama = info["ours"], info["llama_cpp"]
    assert "error" not in ours and ours["kind"] == "reference"
    assert [d["rows"] for d in ours["decode"]] == [1, 2, 4, 8]
    assert all(d["tok_per_s"] > 0 for d in ours["decode"]) and ours["prefill_tok_per_s"] > 0
    assert llama["bench"]["tg8"] > 0 and llama["bench"]["pp64"] > 0, llama
    assert [b["pl"] for b in llama["batched"]] == [1, 2, 4, 8]
    assert all(row["ratio"] is not None and row["ratio"] > 0 for row in info["comparison"])
    assert info["manifest"]["commit"]


@pytest.mark.slow
def test_parallel_smoke_measures_every_figure_on_both_engines(tmp_path: Path) -> None:
    info = run_smoke("parallel", tmp_path)
    results = info["results"]
    assert info["engine_errors"] == {}
    expected = {"short:1", "short:2", "short:4", "forced:1", "forced:4", "interference", "context"}
    assert expected <= set(results)
    for task, engines in results.items():
        if task == "warm_up":
            continue
        wanted = {"openjet"} if task.startswith("forced") else {"openjet", "llama-server"}
        assert set(engines) == wanted, task
        for name, result in engines.items():
            assert "error" not in result and "skipped" not in result, (task, name, result)
    for n in (1, 2, 4):
        for result in results[f"short:{n}"].values():
            assert len(result["per_agent_tok_s"]) == n and result["mean_per_agent_tok_s"] > 0
            assert result["errors"] == [] and min(result["tokens"]) >= 2
        assert results[f"short:{n}"]["llama-server"]["tokens"] == [16] * n  # ignore_eos
    # forced acceptance: drafts were proposed and every one accepted
    forced = results["forced:1"]["openjet"]
    assert forced["drafts_rejected"] == [0] and forced["drafts_accepted"][0] >= 8
    assert results["short:1"]["openjet"]["drafts_accepted"] == [0]  # speculation off
    for name in ("openjet", "llama-server"):
        beside = results["interference"][name]
        assert beside["a_solo_tok_s"] > 0 and beside["b_prefill_tok_s"] > 0
        # follow-ups hit the cache: only the new tokens (and the reply's last) are processed
        for follow in (beside["follow_up"], results["context"][name]["follow_up"]):
            assert follow["ttft_s"] > 0 and follow["prompt_processed"] <= 8 + 1, (name, follow)
        for n in (2, 1):
            assert results["context"][name][f"agents_{n}"]["mean_per_agent_tok_s"] > 0
    summary = info["summary"]
    assert any(row["ratio"] for row in summary["rows"]) and summary["goals"]
    logs = {p.name for p in tmp_path.iterdir()}
    assert {"openjet-server.log", "llama-server.log"} <= logs


def test_provision_adds_targets_to_a_finished_build(tmp_path: Path) -> None:
    write_fake_sdist(tmp_path)
    layout = ls.build_layout(tmp_path)
    server = ls.provision_llama_server(tmp_path, jobs=1, progress=lambda _: None)
    assert server == layout.binary and layout.built_targets() == ["llama-server"]
    assert not layout.has_targets(["other-tool"])
    messages: list[str] = []
    tool = ls.provision_llama_server(
        tmp_path, jobs=1, progress=messages.append, targets=["other-tool", "llama-server"]
    )
    assert tool == layout.target_binary("other-tool") and os.access(tool, os.X_OK)
    assert any(m.startswith("building other-tool with") for m in messages), messages
    assert set(layout.built_targets()) == {"llama-server", "other-tool"} and layout.is_complete()
    again: list[str] = []  # everything built: reused without cmake
    ls.provision_llama_server(tmp_path, progress=again.append, targets=["llama-server", "other-tool"])  # fmt: skip
    assert again == []


def test_marker_without_targets_means_the_server_alone(tmp_path: Path) -> None:
    layout = ls.build_layout(tmp_path)
    for target in ("llama-server", "llama-bench"):
        binary = layout.target_binary(target)
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    layout.marker.write_text("{}")  # written before targets were recorded
    assert layout.is_complete() and not layout.has_targets(["llama-bench"])
    with pytest.raises(ls.LlamaServerError, match=r"no llama\.cpp build target"):
        ls.provision_llama_server(tmp_path, targets=[])


GPU_ONLY = ["decode", "step_host", "weight_access", "product_kernels"]


@pytest.mark.parametrize("script", GPU_ONLY)
def test_gpu_only_benchmarks_say_so_without_a_gpu(script: str) -> None:
    from tests.conftest import cuda_device_usable

    if cuda_device_usable():
        pytest.skip("a GPU is here: the script would run")
    command = [sys.executable, str(ROOT / "bench" / f"{script}.py")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"bench/{script}.py: needs a CUDA GPU" in done.stderr
    assert "Traceback" not in done.stderr


def test_server_gap_measures_the_host_time_between_steps(tmp_path: Path) -> None:
    """bench/server_gap.py: the real server and scheduler over a sleeping stub backend."""
    out = tmp_path / "gap.json"
    command = [sys.executable, str(ROOT / "bench" / "server_gap.py"), "--agents", "2"]
    command += ["--tokens", "24", "--step-ms", "2", "--repeats", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["agents"] == 2 and len(run["ms_per_token"]) == 2
    assert all(t >= 2.0 for t in run["ms_per_token"])  # a step sleeps 2 ms, a token takes one
    assert 0 < run["gap_ms_median"] < 50
