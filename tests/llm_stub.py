"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for the LLM tests.

It answers POST /v1/chat/completions (and /chat/completions) from canned replies and records
every request. Replies are chosen per problem: the first rule whose marker occurs in the
request's messages applies, and the i-th request matching a marker gets replies[i] (the last
reply repeats once they run out). A reply is the assistant's text, a dict
{"status": 429 | 401 | 500, "error": "..."} for an HTTP error, or {"delay": seconds, "reply": ...}
for a slow answer.

    with StubServer({"`collective/llm_good`": [GOOD]}, prompt_tokens=1000) as stub:
        ... --kb-api-base=stub.url ...
        stub.requests   # list of request bodies (dicts), in arrival order
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubServer:
    def __init__(self, rules: dict, default: str = "I cannot help with that.", prompt_tokens: int = 1000,
                 completion_tokens: int = 500):
        self.rules = dict(rules)
        self.default = default
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.requests: list[dict] = []
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet
                pass

            def do_GET(self):
                self._send(200, {"object": "list", "data": []})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                if not self.path.rstrip("/").endswith("chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                    return
                status, payload = stub.answer(body, dict(self.headers))
                self._send(status, payload)

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:     # the client gave up (a request timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reset(self):
        with self.lock:
            self.requests.clear()
            self.counts.clear()

    # ---- answering -----------------------------------------------------------------------------
    @staticmethod
    def text_of(body: dict) -> str:
        parts = []
        for m in body.get("messages") or []:
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(c or "")
        return "\n".join(parts)

    def requests_for(self, marker: str) -> list[dict]:
        return [r for r in self.requests if marker in self.text_of(r)]

    def answer(self, body: dict, headers: dict):
        text = self.text_of(body)
        with self.lock:
            self.requests.append({**body, "_headers": {k.lower(): v for k, v in headers.items()}})
            marker = next((m for m in self.rules if m in text), None)
            if marker is None:
                reply = self.default
            else:
                i = self.counts.get(marker, 0)
                self.counts[marker] = i + 1
                replies = self.rules[marker]
                reply = replies[min(i, len(replies) - 1)]
        if isinstance(reply, dict) and "delay" in reply:   # a slow server: answer late (or never in time)
            time.sleep(reply["delay"])
            reply = reply.get("reply", self.default)
        if isinstance(reply, dict):
            status = reply.get("status", 500)
            kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status, "server_error")
            message = reply.get("error") or {401: "Incorrect API key provided: stub-key.",
                                              429: "Rate limit reached for requests"}.get(status, "server error")
            return status, {"error": {"message": message, "type": kind, "param": None,
                                      "code": "invalid_api_key" if status == 401 else kind}}
        return 200, {
            "id": f"chatcmpl-stub-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                      "total_tokens": self.prompt_tokens + self.completion_tokens},
        }
