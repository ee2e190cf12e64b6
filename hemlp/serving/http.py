"""A ModelService on the standard library's threading HTTP server (``hemlp serve --no-ray``): one process, no Ray,
for a single machine or behind a proxy. Bodies need a Content-Length (411 without), which is checked against the
limit before a byte of the body is read (413 above it); a body is read straight into one buffer and hashed as it
arrives (ModelService.receiver), so a container's checksum is known when its last byte is."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["LocalServer"]


def _handler(service):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hemlp"
        # headers and body go out as two writes: without TCP_NODELAY a kept-alive client's delayed ACK holds the
        # second one back (up to 40 ms on Linux)
        disable_nagle_algorithm = True

        def log_message(self, fmt, *args):      # quiet: the service's answers carry what a client needs
            pass

        def _send(self, status: int, ctype: str, body: bytes, close: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, name: str, message: str) -> None:
            self._send(status, "application/json", json.dumps(dict(error=name, message=message)).encode(), True)

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = b""
            if method == "POST":
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self._error(411, "LengthRequired", "send the body with a Content-Length, not chunked")
                try:
                    n = int(self.headers.get("Content-Length", ""))
                except ValueError:
                    return self._error(411, "LengthRequired", "a POST needs a Content-Length header")
                if n < 0:
                    return self._error(400, "BadRequest", "negative Content-Length")
                if n > service.max_body_bytes:
                    return self._error(413, "PayloadTooLarge", f"the body has {n} bytes, above this server's limit "
                                                               f"of {service.max_body_bytes}")
                receiver = service.receiver(method, url.path, query, n)
                got = receiver.read_from(self.rfile.readinto)
                if got != n:
                    return self._error(400, "TruncatedBody", f"the body ended after {got} of {n} bytes")
                body = receiver.finish()
            self._send(*service.handle(method, url.path, query, body))

        def do_GET(self):  # noqa: N802 - the standard library's names
            self._serve("GET")

        def do_POST(self):  # noqa: N802
            self._serve("POST")

        def do_PUT(self):  # noqa: N802
            self._serve("PUT")

        def do_DELETE(self):  # noqa: N802
            self._serve("DELETE")

    return Handler


class _SharedPortServer(ThreadingHTTPServer):
    # SO_REUSEPORT: several processes (the Ray Serve replicas of one node) listen on one port, the kernel spreading
    # the connections over them
    allow_reuse_port = True


class LocalServer:
    """``with LocalServer(service, port=0) as srv: srv.url``: the service on a background thread (port 0: any free
    one). shared_port: other processes may listen on the same port (SO_REUSEPORT; each connection goes to one of
    them: hemlp.serving.ray_serve's direct port)."""

    def __init__(self, service, host: str = "127.0.0.1", port: int = 8000, shared_port: bool = False):
        cls = _SharedPortServer if shared_port else ThreadingHTTPServer
        self.httpd = cls((host, int(port)), _handler(service))
        self.httpd.daemon_threads = True
        self.thread = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
