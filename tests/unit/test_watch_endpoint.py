"""The agent's /metrics endpoint under clients that do not behave: a bound on clients served at
once, a slow or silent client cut, every scrape answered again once they are gone, and TLS
(with client certificates when asked). Real sockets on the loopback; no RDMA."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
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


def test_300_silent_clients_keep_no_scrape_out_hold_bounded_threads_and_are_cut(monkeypatch):
    monkeypatch.setattr(endpoint, "READ_TIMEOUT_S", 3.0)
    monkeypatch.setattr(endpoint._Handler, "timeout", 3.0)
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        assert "rdmacli_test_total 3.0" in scrape(port)
        base = threading.active_count()
        slow, most = [], 0
        for i in range(300):  # each sends half a request line and waits
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metr")
            slow.append(s)
            most = max(most, threading.active_count() - base)
            if i % 50 == 49:  # amid them, every scrape is answered
                assert "rdmacli_test_total 3.0" in scrape(port), i
        assert most <= 2 * endpoint.MAX_CLIENTS, most  # served ones and cut ones whose read is returning
        assert server.evicted >= 300 - endpoint.MAX_CLIENTS
        assert until(lambda: not server.open, 6)  # the last ones cut at their read timeout
        assert "rdmacli_test_total 3.0" in scrape(port)
        for s in slow:
            s.close()
    finally:
        server.shutdown()


def test_a_client_that_trickles_its_request_is_cut_after_request_s(monkeypatch):
    monkeypatch.setattr(endpoint, "REQUEST_S", 2.0)
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        s = socket.create_connection(("127.0.0.1", port))
        t0 = time.monotonic()
        cut = False
        for ch in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"y" * 40:  # a byte each half second
            try:
                s.sendall(bytes([ch]))
            except OSError:
                cut = True
                break
            time.sleep(0.5)
            if not server.open:
                cut = True
                break
        assert cut and time.monotonic() - t0 < 6, time.monotonic() - t0
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
            ext = d / f"{name}.ext"
            ext.write_text("subjectAltName=DNS:prometheus-1\n")
            subprocess.run(["openssl", "x509", "-req", "-extfile", ext, "-in", csr,
                            "-CA", d / f"{signer}.crt", "-CAkey", d / f"{signer}.key", "-CAcreateserial",
                            "-out", crt, "-days", "1"],
                           check=True, capture_output=True)  # fmt: skip
        return str(crt), str(key)

    return {"server": make("server"), "ca": make("ca"), "client": make("client", signer="ca"),
            "rotated": make("rotated")}  # fmt: skip


def web(tmp_path, text: str):
    from rdmacli.watch.webconfig import WebSource

    path = tmp_path / "web.yml"
    path.write_text(text)
    return path, WebSource(str(path), log=said.append)


said: list[str] = []


def test_tls_and_client_certificates_from_the_web_config(pki, tmp_path):
    crt, key = pki["server"]
    ca = pki["ca"][0]
    _, source = web(tmp_path, f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                    f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca}\n")  # fmt: skip
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, source)
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


def test_client_allowed_sans_admit_only_the_names_listed(pki, tmp_path):
    crt, key = pki["server"]
    ca = pki["ca"][0]
    head = (f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: "
            f"RequireAndVerifyClientCert\n  client_ca_file: {ca}\n  client_allowed_sans: ")  # fmt: skip
    ctx = ssl.create_default_context(cafile=crt)
    ctx.load_cert_chain(*pki["client"])  # its SAN: DNS:prometheus-1
    for names, admitted in (("[prometheus-2]", False), ("[prometheus-1, prometheus-2]", True)):
        _, source = web(tmp_path, head + names + "\n")
        server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, source)
        try:
            if admitted:
                assert "rdmacli_test_total 3.0" in scrape(
                    server.server_address[1], scheme="https", context=ctx
                )
            else:
                with pytest.raises(OSError):
                    scrape(server.server_address[1], scheme="https", context=ctx)
        finally:
            server.shutdown()


def trusting(crt: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=crt)


def basic(user: str, password: str) -> dict:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def get(port: int, headers: dict | None = None) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_its_changes_read_again_and_a_broken_change_fails_closed(tmp_path, monkeypatch):
    import bcrypt

    from rdmacli.watch import webconfig

    monkeypatch.setattr(webconfig, "RECHECK_S", 0.0)
    h1, h2 = (bcrypt.hashpw(p, bcrypt.gensalt(4)).decode() for p in (b"one", b"two"))
    path, source = web(tmp_path, f"basic_auth_users:\n  prom: {h1}\n")
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, source)
    port = server.server_address[1]
    try:
        assert get(port) == 401
        assert get(port, basic("prom", "two")) == 401
        assert get(port, basic("nobody", "one")) == 401
        assert get(port, {"Authorization": "Basic !!notbase64"}) == 401
        assert get(port, basic("prom", "one")) == 200
        path.write_text(f"basic_auth_users:\n  prom: {h2}\n  other: {h1}\n")  # a changed password
        assert get(port, basic("prom", "one")) == 401  # the cache of good passwords went with it
        assert get(port, basic("prom", "two")) == 200 and get(port, basic("other", "one")) == 200
        said.clear()
        path.write_text("basic_auth_users: [not, a, mapping]\n")  # a change that does not load
        assert get(port, basic("prom", "two")) == 503 and get(port, basic("prom", "two")) == 503
        assert len(said) == 1 and "scrapes refused until it loads" in said[0], said
        path.write_text(f"basic_auth_users:\n  prom: {h2}\n")
        assert get(port, basic("prom", "two")) == 200 and "loads again" in said[-1]
    finally:
        server.shutdown()


def test_a_rotated_certificate_is_served_without_a_restart(pki, tmp_path, monkeypatch):
    import shutil

    from rdmacli.watch import webconfig

    monkeypatch.setattr(webconfig, "RECHECK_S", 0.0)
    crt, key = pki["server"]
    shutil.copy(crt, tmp_path / "tls.crt")
    shutil.copy(key, tmp_path / "tls.key")
    _, source = web(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")  # relative
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, source)
    port = server.server_address[1]
    try:
        assert "rdmacli_test_total" in scrape(
            port, scheme="https", context=ssl.create_default_context(cafile=crt)
        )
        new_crt, new_key = pki["rotated"]
        shutil.copy(new_key, tmp_path / "tls.key")
        shutil.copy(new_crt, tmp_path / "tls.crt")
        with pytest.raises(OSError):  # the old certificate is no longer what it presents
            scrape(port, scheme="https", context=trusting(crt))
        assert "rdmacli_test_total" in scrape(
            port, scheme="https", context=ssl.create_default_context(cafile=new_crt)
        )
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
            "cipher_suites not supported",
        ),
        ("basic_auth_user:\n  a: b\n", "basic_auth_user not supported"),
        ("http_server_config:\n  http2: false\n", "http_server_config not supported"),
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "nope.crt: No such file"),
        ("tls_server_config:\n  key_file: k\n", "needs cert_file and key_file"),
        ("basic_auth_users:\n  prom: secret\n", "not a bcrypt hash"),
        ("basic_auth_users:\n  'a:b': '$2y$10$" + "x" * 53 + "'\n", "':'"),
        ("basic_auth_users: {" + ", ".join(f"u{i}: x" for i in range(300)) + "}\n", "at most 256"),
        ("- a list\n", "a mapping"),
        ("{{{", "not YAML"),
        ("x: " + "y" * 70000 + "\n", "larger than 64 KiB"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
            "not supported (one of",
        ),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n", "TLS12 or TLS13"),
        ("!!python/object/apply:os.system ['true']\n", "not YAML"),
    ],
)
def test_a_web_config_that_does_not_load_is_said_by_key(tmp_path, text, words):
    from rdmacli.watch.webconfig import WebConfigError

    with pytest.raises(WebConfigError, match=None) as exc:
        web(tmp_path, text)
    assert words in str(exc.value), exc.value


def test_each_field_changed_live_decides_who_is_let_in_at_the_next_client_and_is_logged(
    pki, tmp_path, monkeypatch
):
    """Issue 70: `NoClientCert` changed to `RequireAndVerifyClientCert` while the agent ran still
    let a client without a certificate in, and the change back refused everyone until a restart
    (a context swapped in mid-handshake keeps the listener's verify mode). Each client is now
    accepted with the file's context as it stands, whole; each change applied is logged."""
    import bcrypt

    from rdmacli.watch import webconfig

    monkeypatch.setattr(webconfig, "RECHECK_S", 0.0)
    crt, key = pki["server"]
    head = f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
    path, source = web(tmp_path, head)
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0, source)
    port = server.server_address[1]
    anonymous, holder = trusting(crt), trusting(crt)
    holder.load_cert_chain(*pki["client"])  # signed by pki's "ca"

    def admitted(ctx, headers=None) -> bool:
        req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                return r.status == 200
        except (OSError, urllib.error.HTTPError):
            return False

    def change(text: str) -> None:
        said.clear()
        path.write_text(text)
        time.sleep(0.01)  # a new mtime on any file system clock

    require = head + f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['ca'][0]}\n"
    try:
        assert admitted(anonymous) and admitted(holder)
        change(require)
        assert not admitted(anonymous) and admitted(holder)
        assert "read again" in said[0] and "RequireAndVerifyClientCert" in said[0], said
        change(require.replace(pki["ca"][0], crt))  # another CA
        assert not admitted(holder) and not admitted(anonymous)
        change(require + "  client_allowed_sans: [prometheus-2]\n")
        assert not admitted(holder)
        change(require + "  client_allowed_sans: [prometheus-1]\n")
        assert admitted(holder)
        h = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
        change(require + f"basic_auth_users:\n  prom: {h}\n")
        assert not admitted(holder) and admitted(holder, basic("prom", "pw"))
        assert "1 basic-auth user(s)" in said[0], said
        change(head)  # and back: everyone with TLS, no restart
        assert admitted(anonymous) and admitted(holder)
        change(require + "  client_auth_type: [broken\n")  # does not load: nobody, said
        assert not admitted(holder) and "scrapes refused until it loads" in said[0], said
        change(head)
        assert admitted(anonymous) and "loads again" in said[-1], said
    finally:
        server.shutdown()


def test_clients_trickling_their_headers_are_evicted_for_scrapes(monkeypatch):
    """Issue 70: eight clients that send a request line and then trickle their headers were no
    longer evictable and held every slot for REQUEST_S: 5 of 22 scrapes answered. A client is
    served (no longer evictable) only once its headers are in."""
    server = endpoint.serve_metrics(registry(), "127.0.0.1", 0)
    port = server.server_address[1]
    slow = []
    try:
        for _ in range(3 * endpoint.MAX_CLIENTS):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: y")  # its line, and a header never ended
            slow.append(s)
        answered = 0
        for _ in range(22):
            for s in slow:  # each keeps trickling: a byte within every read's timeout
                with contextlib.suppress(OSError):
                    s.sendall(b"y")
            with contextlib.suppress(OSError):
                answered += "rdmacli_test_total 3.0" in scrape(port)
        assert answered == 22, answered
    finally:
        for s in slow:
            s.close()
        server.shutdown()


def test_a_credential_costs_bcrypt_once_good_or_bad_and_one_check_runs_at_a_time(tmp_path, monkeypatch):
    """Issue 70: eight clients with a wrong password cost the agent about a core each (bcrypt on
    every request). A credential is checked once, good or bad (a bounded cache by digest); an
    unknown name costs a check as a known one does; checks run one at a time."""
    import bcrypt

    h = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()
    _, source = web(tmp_path, f"basic_auth_users:\n  prom: {h}\n")
    calls, running, most = [], [0], [0]
    real = bcrypt.checkpw

    def counted(pw, hashed):
        running[0] += 1
        most[0] = max(most[0], running[0])
        calls.append(pw)
        try:
            time.sleep(0.01)
            return real(pw, hashed)
        finally:
            running[0] -= 1

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    headers = [basic("prom", "wrong")["Authorization"], basic("nobody", "x")["Authorization"],
               basic("prom", "right")["Authorization"]]  # fmt: skip

    def client(header: str) -> None:
        for _ in range(20):
            source.authorized(header)

    threads = [threading.Thread(target=client, args=(headers[i % 3],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(calls) == [b"right", b"wrong", b"x"], calls  # once each, of 160 requests
    assert most[0] == 1
    assert source.authorized(headers[2]) and not source.authorized(headers[0])
    assert not source.authorized(headers[1])


def test_a_web_config_or_a_file_it_names_that_others_can_write_or_that_is_no_file_is_refused(
    pki, tmp_path, monkeypatch
):
    """Issue 70: a world-writable web config was accepted and read again live (another user
    wrote `{}` and an unauthenticated scrape got 200); a key file owned by another user was
    accepted; a FIFO as the config or as cert_file hung the start without a word. Each is now
    refused by name, at start (exit 2) and when read again (scrapes fail closed)."""
    import shutil

    from rdmacli.watch import webconfig

    monkeypatch.setattr(webconfig, "RECHECK_S", 0.0)
    crt, key = pki["server"]
    mine = tmp_path / "tls.key"
    shutil.copy(key, mine)
    os.chmod(mine, 0o600)
    text = f"tls_server_config:\n  cert_file: {crt}\n  key_file: {mine}\n"
    path = tmp_path / "web.yml"
    path.write_text(text)
    os.chmod(path, 0o666)
    with pytest.raises(webconfig.WebConfigError, match="mode 0666: others may write it"):
        webconfig.load(str(path))
    os.chmod(path, 0o644)
    os.chown(mine, 4242, 4242)
    with pytest.raises(webconfig.WebConfigError, match="key_file: .*owned by uid 4242"):
        webconfig.load(str(path))
    os.chown(mine, os.geteuid(), os.getegid())
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for bad in (text.replace(str(mine), str(fifo)), None):
        if bad:
            path.write_text(bad)
        t0 = time.monotonic()
        with pytest.raises(webconfig.WebConfigError, match="not a regular file"):
            webconfig.load(str(path) if bad else str(fifo))
        assert time.monotonic() - t0 < 2
    path.write_text(text)
    source = webconfig.WebSource(str(path), log=said.append)  # loads: 0644, ours
    said.clear()
    path.write_text("{}\n")
    os.chmod(path, 0o666)  # another user's `{}`: refused, not served to all
    with pytest.raises(webconfig.WebConfigError, match="others may write it"):
        source.current()
    assert "scrapes refused until it loads" in said[0], said


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_fifo_as_the_web_config_is_said_at_start_not_waited_on(tmp_path):
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    cmd = [sys.executable, "-m", "rdmacli", "watch", "run", "--map", str(mapfile), "--node", "n1",
           "--state-file", str(tmp_path / "s.json"), "--metrics", f"127.0.0.1:{free_port()}",
           "--web-config-file", str(fifo)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_client_gone_mid_answer_writes_nothing_to_the_log_an_agents_own_error_one_line(capsys):
    """Issue 70 (the agent's soak): wsgiref printed a 23-line traceback to the journal for every
    client that hung up while its answer was written, as often as a client likes. A client gone
    is said nowhere; an error of the agent's own in one line."""
    raised = [BrokenPipeError(32, "Broken pipe"), ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
              ValueError("a collector of our own failed")]  # fmt: skip

    class Failing:
        def collect(self):
            raise raised.pop(0)

    r = CollectorRegistry()
    r.register(Failing())
    port = free_port()
    httpd = endpoint.serve_metrics(r, "127.0.0.1", port)
    try:
        for _ in range(3):
            with contextlib.suppress(OSError):
                scrape(port)
        assert until(lambda: not raised, 10)
        httpd.shutdown()
    finally:
        httpd.server_close()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Broken pipe" not in err and "EOF occurred" not in err, err
    assert err.count("watch: /metrics: ValueError: a collector of our own failed") == 1, err
