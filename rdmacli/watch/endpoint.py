"""The agent's /metrics endpoint: prometheus_client's WSGI app, served with bounds an always-on
agent needs. prometheus_client's own server starts a thread per connection with no read timeout
(800 half-sent requests held 802 threads, and under a unit's task limit the agent's own next
thread failed); here at most MAX_CLIENTS are served at once (one more cuts the client that has
waited longest without a request, or is closed at once if every slot is serving), each
read waits at most READ_TIMEOUT_S, a TLS handshake happens in the client's thread (never in the
accept loop, where one slow client would stall every scrape), a connection is closed after
REQUEST_S whatever it does. TLS, client certificates and basic auth come from the web config
file (webconfig.py), looked at again for each client."""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from typing import TYPE_CHECKING
from wsgiref.simple_server import make_server

from prometheus_client.exposition import ThreadingWSGIServer, _get_best_family, _SilentHandler, make_wsgi_app

from rdmacli.watch.webconfig import WebConfigError

if TYPE_CHECKING:
    from rdmacli.watch.webconfig import WebSource

MAX_CLIENTS = 8  # scrapes served at once (a Prometheus pair and a person or two)
READ_TIMEOUT_S = 5.0  # one read of a request (or a TLS handshake) that waits longer is dropped
EVICT_WAIT_S = 0.5  # for a cut client's thread to give its slot back
REQUEST_S = 15.0  # a client's whole connection, however it trickles (a byte every few seconds)


# what a client that hung up or stalled mid-answer raises in wsgiref's writes: its own trouble
CLIENT_GONE = (ConnectionError, TimeoutError, ssl.SSLError)


class _OneLine:
    """wsgiref's stderr for one request. wsgiref prints a traceback for whatever the answer's
    writes raise: a client hanging up mid-answer wrote 23 lines to the journal each time (any
    client can do it, as often as it likes). A client gone is said nowhere, as handle_error
    does for a handshake or a read; anything else, an error of the agent's own, in one line.
    Judged by the exception's type: wsgiref writes its traceback here from within the except
    block that caught it, so the exception is the one being handled."""

    def __init__(self, err) -> None:
        self.err = err

    def write(self, text: str) -> None:
        pass  # the traceback's lines: what is said is made from the exception in flush

    def flush(self) -> None:
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, CLIENT_GONE):
            self.err.write(f"watch: /metrics: {type(exc).__name__}: {str(exc)[:300]}\n")
            self.err.flush()


class _Handler(_SilentHandler):
    timeout = READ_TIMEOUT_S  # socketserver.StreamRequestHandler: the socket's timeout

    def get_stderr(self):
        return _OneLine(sys.stderr)

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # here, in this client's thread, within the timeout
            web = self.server.web  # type: ignore[attr-defined]
            tls = web.current().tls
            if tls is not None and not tls.admits(self.connection.getpeercert()):
                raise ssl.SSLError("client certificate's names not in client_allowed_sans")

    def parse_request(self) -> bool:
        """The request line and its headers are in (http.server reads the headers here): from
        here this client is served, no longer one that may be evicted. (Discarded before the
        headers were read, a client that sent its line and trickled its headers held a slot
        for REQUEST_S: eight such kept every scrape out.)"""
        ok = super().parse_request()
        self.server.reading.discard(self.connection)  # type: ignore[attr-defined]
        return ok


class BoundedServer(ThreadingWSGIServer):
    """A thread per client, at most `max_clients` of them. When every slot is taken, the client
    that has waited longest without sending its request is cut for the newcomer: clients that
    open connections and say nothing (300 of them, or a steady stream) cannot keep a scrape out,
    and threads stay bounded (a cut client's thread ends when its read returns)."""

    max_clients = MAX_CLIENTS
    tls = False  # each client wrapped in the web config's context as it stands (get_request)
    request_queue_size = 64  # socketserver's 5 left a burst's clients in SYN retries for seconds

    def server_activate(self) -> None:
        super().server_activate()
        self.slots = threading.BoundedSemaphore(self.max_clients)
        self.refused = 0  # connections closed at once: every slot was taken
        self.open: dict[socket.socket, float] = {}  # each client's socket -> when it came
        self.reading: set[socket.socket] = set()  # those whose request is not in yet
        self.evicted = 0

    def get_request(self):
        """Accept one client with the web config's context as it stands now, whole: certificate,
        CAs, minimum version and client-certificate rule alike. (A context swapped in during the
        handshake, as an SNI callback does, changes the certificate but keeps the listener's
        verify mode: a live change to RequireAndVerifyClientCert let clients without one in.)
        While the file does not load, a client is accepted and closed at once: fail closed."""
        conn, addr = super().get_request()
        if not self.tls:
            return conn, addr
        try:
            ctx = self.web.context()  # type: ignore[attr-defined]
        except (WebConfigError, ssl.SSLError):
            conn.close()
            self.refused += 1
            raise OSError("the web config does not load: client refused") from None
        return ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), addr

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False) and not self._evict_for_one():
            self.refused += 1
            self.shutdown_request(request)
            return
        self.open[request] = time.monotonic()
        self.reading.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.open.pop(request, None)
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.open.pop(request, None)
            self.reading.discard(request)
            self.slots.release()

    def _evict_for_one(self) -> bool:
        """Cut the longest-waiting client still sending its request; a slot within EVICT_WAIT_S."""
        waiting = [s for s in list(self.reading) if s in self.open]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda s: self.open.get(s, 0.0))
        self.reading.discard(oldest)
        self.evicted += 1
        try:
            oldest.shutdown(socket.SHUT_RDWR)  # its thread's read returns; the slot comes back
        except OSError:
            pass
        return self.slots.acquire(timeout=EVICT_WAIT_S)

    def service_actions(self) -> None:
        """Every turn of the accept loop (twice a second): a client past REQUEST_S is cut (its
        thread's blocked read returns, and its slot comes back)."""
        now = time.monotonic()
        for sock, since in list(self.open.items()):
            if now - since > REQUEST_S:
                self.open.pop(sock, None)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request, client_address) -> None:
        """A client that timed out, reset or failed its handshake: its own trouble, said nowhere
        (socketserver would print a traceback to stderr for each)."""


def guarded(app, web: WebSource):
    """The WSGI app behind basic auth (where the file has users), failing closed while the file
    does not load."""

    def wsgi(environ, start_response):
        try:
            ok = web.authorized(environ.get("HTTP_AUTHORIZATION"))
        except WebConfigError:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"the agent's web config does not load: see its log\n"]
        if not ok:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="rdmacli"'),
                                                ("Content-Type", "text/plain")])  # fmt: skip
            return [b"Unauthorized\n"]
        return app(environ, start_response)

    return wsgi


def serve_metrics(registry, addr: str, port: int, web: WebSource | None = None) -> BoundedServer:
    """Start serving `registry` at addr:port in a daemon thread; the server (its `shutdown` stops it)."""

    class Server(BoundedServer):
        pass

    Server.address_family, addr = _get_best_family(addr, port)
    app = make_wsgi_app(registry) if web is None else guarded(make_wsgi_app(registry), web)
    httpd = make_server(addr, port, app, Server, handler_class=_Handler)
    httpd.web = web  # type: ignore[attr-defined]
    httpd.tls = web is not None and web.current().tls is not None  # fixed at start, as the file says
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd
