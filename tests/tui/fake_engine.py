"""A stand-in for `openjet serve` in start-up tests: after an optional delay it answers
`/health` and a fixed `/v1/slots` on the port given, until terminated.

Run: `python fake_engine.py PORT [DELAY_S]`. It prints a few log lines as an engine would.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOTS = {
    "engine": {
        "kind": "llama-server",
        "model": "Qwen3.8-27B-Q4_K_M.gguf",
        "fallback_reason": "GPU compute capability 6.1 is below 8.0",
        "vram_used_bytes": 8 * 2**30,
        "vram_total_bytes": 24 * 2**30,
        "kv_pool_tokens": 131072,
        "kv_pool_used": 4096,
        "tokens_per_second": 57.5,
    },
    "slots": [
        {"id": 0, "state": "decode", "tokens_per_second": 30.0, "context_used": 3000,
         "context_limit": 32768, "cached_tokens": 2048, "drafts_proposed": 100,
         "drafts_accepted": 80, "request_id": "r1"},
        {"id": 1, "state": "idle", "tokens_per_second": 27.5, "context_used": 1096,
         "context_limit": 32768, "cached_tokens": 0, "drafts_proposed": 0,
         "drafts_accepted": 0, "request_id": None},
    ],
    "queued": 0,
}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        routes = {"/health": {"status": "ok"}, "/v1/slots": SLOTS, "/v1/models": {"data": []}}
        body = routes.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body or {"error": "not found"}).encode())

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(sys.argv[1])
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    print("loading weights…", flush=True)
    time.sleep(delay)
    print(f"serving on 127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
