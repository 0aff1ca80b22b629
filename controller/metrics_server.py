"""`linuxfp run --metrics ADDR:PORT`: /metrics served from a thread of the
running controller.

prometheus_client's own start_http_server() cannot be stopped (Debian 12
ships 0.16, where it returns nothing), so its WSGI app is served here by a
wsgiref server we can shut down. The thread only answers scrapes: every
value is read at scrape time by controller/metrics.py, nothing polls. It
shares the interpreter with the event loop, so a scrape costs the loop the
GIL for as long as it reads the maps: milliseconds, and with iptables rules
counted in the fast path, every flow cache slot too (~15 ms for 4 096 slots
per CPU); they are attributed with what the loop published (the rules as
last applied, Node.publish), never a read of the kernel's state beside it."""
from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


def parse_address(text: str) -> tuple[str, int]:
    """'ADDR:PORT' or '[IPv6]:PORT' → (address, port); ValueError says what
    is expected."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected ADDR:PORT, e.g. 127.0.0.1:9469 or [::1]:9469")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape: the controller's log is for changes."""

    def log_message(self, *args) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True     # a scrape in progress never holds the controller's exit


class MetricsServer:
    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self.httpd, self.thread = httpd, thread

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    @classmethod
    def start(cls, controller, address: str, port: int) -> "MetricsServer":
        """Listen on (address, port) in the controller's network namespace;
        MetricsUnavailable names the cause if it cannot."""
        from .metrics import MetricsUnavailable, registry, require_client

        require_client()
        from prometheus_client import make_wsgi_app

        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        server_class = type("MetricsHTTPServer", (_Server,), {"address_family": family})
        app = make_wsgi_app(registry(controller.layout, controller))
        try:
            httpd = make_server(address, port, app, server_class, handler_class=_QuietHandler)
        except OSError as e:
            raise MetricsUnavailable(
                f"cannot serve metrics on {address}:{port}: {e.strerror or e} "
                "(choose a free port, and an address of this network namespace)") from None
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="linuxfp-metrics", daemon=True)
        thread.start()
        return cls(httpd, thread)

    def close(self) -> None:
        """Stop answering (within the 0.2 s poll interval) and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
