"""A stand-in for ``python -m llama_cpp.server`` that crashes on cue, for supervisor tests.

Takes the llama.cpp server's arguments (only ``--port`` matters), answers ``/v1/models``
and ``/v1/chat/completions`` with ``{"ok": true}``, and misbehaves as ``FAKE_LLAMA``
says:

* ``ok`` — never crashes;
* ``crash-on:WORD`` — SIGSEGV itself when a request's messages contain WORD;
* ``crash-on-chat`` — SIGSEGV itself on every chat request (a broken build);
* ``die-after-first`` — answer the first chat request, then SIGSEGV itself.

Before dying it prints a line to stderr, as llama.cpp's fault handler would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODE = os.environ.get("FAKE_LLAMA", "ok")
_served = 0


def _die() -> None:
    print("ggml: general protection fault in libggml-cpu.so (fake)", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(60)  # the signal may land on another thread: answer nothing meanwhile


def _die_soon() -> None:
    time.sleep(0.3)  # the first answer goes out before the crash
    _die()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        print(format % args, file=sys.stderr, flush=True)

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        key = os.environ.get("API_KEY")
        if key is None or self.headers.get("authorization") == f"Bearer {key}":
            return True
        self.send_response(401)
        self.send_header("content-length", "0")
        self.end_headers()
        return False

    def do_GET(self) -> None:
        if self._authorized():
            self._send({"object": "list", "data": [{"id": "gemma-3-270m-q4_k_m"}]})

    def do_POST(self) -> None:
        global _served
        if not self._authorized():
            return
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        text = json.dumps(json.loads(raw).get("messages", []))
        if MODE == "crash-on-chat" or (
            MODE.startswith("crash-on:") and MODE.split(":", 1)[1] in text
        ):
            _die()
        _served += 1
        self._send(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": "gemma-3-270m-q4_k_m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": '{"ok": true}'},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
            }
        )
        if MODE == "die-after-first" and _served == 1:
            threading.Thread(target=_die_soon, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args, _ = parser.parse_known_args()
    print(f"fake llama.cpp server on {args.port}, mode {MODE}", file=sys.stderr, flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
