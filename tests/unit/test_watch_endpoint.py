"""The agent's /metrics endpoint under clients that do not behave: a bound on clients served at
once, a slow or silent client cut, every scrape answered again once they are gone, and TLS
(with client certificates when asked). Real sockets on the loopback; no RDMA."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from rdmacli.watch import endpoint


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("rdmacli_test_total", "a counter", registry=r).inc(3)
    return r


def scrape(port: int, **kw) -> str:
    with urllib.request.urlopen(
        f"{kw.pop('scheme', 'http')}://127.0.0.1:{port}/metrics", timeout=5, **kw
    ) as r:
        return r.read().decode()


def until(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_half_sent_requests_hold_no_more_than_the_bound_and_are_cut(monkeypatch):
    monkeypatch.setattr(endpoint, "REQUEST_S", 3.0)
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        assert "rdmacli_test_total 3.0" in scrape(port)
        base = threading.active_count()
        slow = []
        for _ in range(60):  # each sends half a request line and waits
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metr")
            slow.append(s)
        most = [0]

        def all_taken() -> bool:
            most[0] = max(most[0], threading.active_count() - base)
            return server.refused >= 60 - endpoint.MAX_CLIENTS

        assert until(all_taken, 2), server.refused  # the rest closed at once, none waits
        assert most[0] <= endpoint.MAX_CLIENTS
        assert until(lambda: not server.open, 10)  # every slow client cut after REQUEST_S
        assert "rdmacli_test_total 3.0" in scrape(port)  # and scrapes are answered again
        for s in slow:
            s.close()
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")

    def make(name: str, signer: str | None = None):
        key, crt = d / f"{name}.key", d / f"{name}.crt"
        if signer is None:
            cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                   "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", f"/CN={name}",
                   "-addext", "subjectAltName=IP:127.0.0.1"]  # fmt: skip
            subprocess.run(cmd, check=True, capture_output=True)
        else:
            csr = d / f"{name}.csr"
            subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}"],
                           check=True, capture_output=True)  # fmt: skip
            subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", d / f"{signer}.crt", "-CAkey",
                            d / f"{signer}.key", "-CAcreateserial", "-out", crt, "-days", "1"],
                           check=True, capture_output=True)  # fmt: skip
        return str(crt), str(key)

    return {"server": make("server"), "ca": make("ca"), "client": make("client", signer="ca")}


def test_tls_and_client_certificates(pki):
    crt, key = pki["server"]
    tls = endpoint.Tls(crt, key, client_cafile=pki["ca"][0]).context()
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, tls)
    port = server.server_address[1]
    try:
        ctx = ssl.create_default_context(cafile=crt)
        with pytest.raises(OSError):  # no client certificate: refused in the handshake
            scrape(port, scheme="https", context=ctx)
        ctx.load_cert_chain(*pki["client"])
        assert "rdmacli_test_total 3.0" in scrape(port, scheme="https", context=ctx)
        with pytest.raises(OSError):  # plain HTTP to a TLS endpoint: nothing served
            scrape(port)
        silent = socket.create_connection(("127.0.0.1", port))  # a handshake that never starts
        assert "rdmacli_test_total 3.0" in scrape(port, scheme="https", context=ctx)  # others go on
        silent.close()
    finally:
        server.shutdown()
