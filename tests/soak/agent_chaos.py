"""The watch agent through an hour of what a fleet and a hostile host do to it (`make
agent-soak`, SOAK_S seconds, default 3600; not part of `make test`). Issue 70: the agent must
never die of its inputs or its host, and its verdicts and /metrics must stay as they were.

One agent (tests/soak/standin_agent.py: the real CLI, map, state file, /metrics, web config and
key; only the RDMA prober replaced by a healthy fabric's answers) runs with TLS and basic auth on
/metrics and its state file on a 64 KiB tmpfs of its own. In turns, until SOAK_S has passed:

- reload: a map of 2 rails, then 1, 3, a node removed, nodes reordered (each taken at the next
  window), this node renamed away or a broken map (each refused, the old plan going on);
- plant: a symlink, a directory or a FIFO put at the state path, then taken away;
- full disk: the tmpfs filled, then emptied;
- web config: the password changed, client certificates required, then not, a config that does
  not load (fails closed), each checked by who is let in;
- slow clients: twelve connections trickling their headers while a scrape must still come.

After every turn the agent must be alive and say nothing that is a traceback; where the turn
allows, a scrape with the config's credentials answers 200 and one without is refused; the state
file, once written again, names nothing (the fabric is healthy) and has the map's rails. Its
resident memory, fds and threads at the first turn and at the end are printed and held flat.
Prints one line per turn and a summary; exits 1 on any failure.

    SOAK_S=600 python tests/soak/agent_chaos.py
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
SOAK_S = float(os.environ.get("SOAK_S", "3600"))
RSS_MB = float(os.environ.get("SOAK_RSS_MB", "8"))
WINDOW_S = 5.0
USER = "prometheus"
NODES = ("n1", "n2", "n3")
failures: list[str] = []


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def fail(text: str) -> None:
    failures.append(text)
    say(f"FAIL: {text}")


def until(cond, seconds: float) -> bool:
    """cond() true within `seconds` (looked at every 0.2 s): every wait here has its deadline."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return bool(cond())


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", str(d / "node.key"), "-out", str(d / "node.crt"), "-days", "2",
            "-subj", "/CN=node", "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip
    openssl("req", "-x509", *ec, "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"), "-days", "2",
            "-subj", "/CN=ca")  # fmt: skip
    openssl("req", *ec, "-keyout", str(d / "client.key"), "-out", str(d / "client.csr"), "-subj", "/CN=prom")
    openssl("x509", "-req", "-in", str(d / "client.csr"), "-CA", str(d / "ca.crt"), "-CAkey",
            str(d / "ca.key"), "-CAcreateserial", "-out", str(d / "client.crt"), "-days", "2")  # fmt: skip
    for f in d.iterdir():
        f.chmod(0o600)


def bcrypt_hash(password: str) -> str:
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()  # cost 4: the soak's, not a fleet's


class Scraper:
    """GETs of /metrics as Prometheus makes them: TLS (this node's certificate trusted), basic
    auth, a client certificate when asked."""

    def __init__(self, d: Path, port: int):
        self.d, self.port = d, port

    def get(self, password: str | None, cert: bool = False, timeout: float = 10.0) -> int:
        """The HTTP status, or 0 when the connection or handshake failed."""
        ctx = ssl.create_default_context(cafile=str(self.d / "node.crt"))
        if cert:
            ctx.load_cert_chain(str(self.d / "client.crt"), str(self.d / "client.key"))
        headers = ""
        if password is not None:
            token = base64.b64encode(f"{USER}:{password}".encode()).decode()
            headers = f"Authorization: Basic {token}\r\n"
        request = f"GET /metrics HTTP/1.1\r\nHost: node\r\n{headers}Connection: close\r\n\r\n"
        try:
            raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
            with raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(request.encode())
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except (OSError, ssl.SSLError):
            return 0
        line = data.split(b"\r\n", 1)[0].split()
        if len(line) < 2 or not line[1].isdigit():
            return 0
        if line[1] == b"200" and b"rdmacli_watch_" not in data:
            return -1  # a 200 without the agent's series
        return int(line[1])


def web_config(d: Path, password: str, require_cert: bool, broken: bool = False) -> str:
    auth = "RequireAndVerifyClientCert\n  client_ca_file: ca.crt" if require_cert else "NoClientCert"
    extra = "rate_limit: 10\n" if broken else ""
    return (f"tls_server_config:\n  cert_file: node.crt\n  key_file: node.key\n  client_auth_type: {auth}\n"
            f"basic_auth_users:\n  {USER}: {bcrypt_hash(password)}\n{extra}")  # fmt: skip


def replace(path: Path, text: str, mode: int = 0o600) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def maps() -> list[tuple[str, str, int | None]]:
    """(what, map text, the rails it gives this node, None when the agent must refuse it)."""

    def m(names, rails):
        return "".join(f"{n} " + " ".join(f"10.{60 + r}.0.{names.index(n) + 1}" for r in range(rails)) + "\n"
                       for n in names)  # fmt: skip

    return [
        ("2 rails", m(NODES, 2), 2),
        ("1 rail (a rail removed)", m(NODES, 1), 1),
        ("3 rails (two added)", m(NODES, 3), 3),
        ("n3 removed", m(NODES[:2], 3), 3),
        ("nodes reordered", m(("n3", "n2", "n1"), 2), 2),
        ("this node renamed away", m(("n9", "n2", "n3"), 2), None),
        ("a broken map", "n1 10.60.0.1 10.61.0.1\nn2 not-an-address\n", None),
    ]


def footprint(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")) // 1024
    threads = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("Threads:"))
    fds = min(len(os.listdir(f"/proc/{pid}/fd")) for _ in range(3))  # a write holds one for a moment
    return {"rss_mb": rss, "fds": fds, "threads": threads}


class Soak:
    def __init__(self, d: Path):
        self.d = d
        self.state_dir = d / "state"
        self.state_dir.mkdir()
        self.tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs",
                                     str(self.state_dir)], capture_output=True).returncode == 0  # fmt: skip
        self.state = self.state_dir / "watch.json"
        self.map = d / "watch.map"
        self.web = d / "web.yml"
        self.log = d / "agent.err"
        self.password, self.require_cert, self.rails = "first", False, 2
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.scraper = Scraper(d, self.port)
        self.counts: dict[str, int] = {}

    def start(self) -> None:
        make_pki(self.d)
        replace(self.map, maps()[0][1], 0o644)
        replace(self.web, web_config(self.d, self.password, False))
        key = str(self.d / "watch.key")
        subprocess.run([sys.executable, "-m", "rdmacli", "watch", "key", key], check=True)
        cmd = [sys.executable, str(HERE / "standin_agent.py"), "watch", "run", "--map", str(self.map),
               "--node", "n1", "--window", str(WINDOW_S), "--state-file", str(self.state),
               "--metrics", f"127.0.0.1:{self.port}", "--web-config-file", str(self.web),
               "--key-file", key]  # fmt: skip
        self.err = open(self.log, "w")  # noqa: SIM115 - the agent's words for an hour: a file, never a full pipe
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err)
        if not until(lambda: self.written(), 120):
            raise SystemExit(f"the agent never wrote its state file: {self.log.read_text()[-2000:]}")

    def written(self) -> dict | None:
        if not self.state.is_file() or self.state.is_symlink():
            return None
        try:
            return json.loads(self.state.read_text())
        except (OSError, ValueError):
            return None

    def alive(self, turn: str) -> bool:
        if self.proc.poll() is not None:
            fail(f"{turn}: the agent exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            return False
        if "Traceback" in self.log.read_text():
            fail(f"{turn}: a traceback in the agent's words")
            return False
        return True

    def said_since(self, mark: int, words: str, seconds: float) -> bool:
        return until(lambda: words in self.log.read_text()[mark:], seconds)

    def window_after(self, later: float = 0.0) -> dict | None:
        """The state file of a window that ended `later` seconds after now or more (None: none
        within three windows more)."""
        now = time.time() + later
        got: list[dict] = []

        def fresh() -> bool:
            doc = self.written()
            if doc and doc.get("time", 0) > now:
                got.append(doc)
                return True
            return False

        return got[0] if until(fresh, later + 3 * WINDOW_S + 10) else None

    def healthy(self, turn: str, rails: int | None = None) -> None:
        """The state file written again names nothing; with `rails`, after a reload: a window of
        the new plan (it starts at the next window, so the one in progress is let go by)."""
        doc = self.window_after(WINDOW_S if rails is not None else 0.0)
        if doc is None:
            fail(f"{turn}: no state file written within three windows: {self.log.read_text()[-1500:]}")
            return
        if doc["pairs"] or any(n["state"] != "ok" for n in doc["nics"]):
            fail(f"{turn}: a healthy fabric named something: {doc['pairs']} {doc['nics']}")
        if rails is not None and len(doc["nics"]) != rails:
            fail(f"{turn}: the state file has {len(doc['nics'])} rails, the map {rails}")

    def scrapes(self, turn: str) -> None:
        """Who is let in, as the config stands: its password (and certificate) 200, none 401."""
        good = self.scraper.get(self.password, cert=self.require_cert)
        if good != 200:
            fail(f"{turn}: a scrape with the config's credentials got {good}")
        if self.scraper.get(None, cert=self.require_cert) not in (401,):
            fail(f"{turn}: a scrape without credentials was not refused with 401")

    # the turns ----------------------------------------------------------------------------
    def reload(self) -> None:
        what, text, rails = random.choice(maps())
        turn = f"reload: {what}"
        mark = len(self.log.read_text())
        replace(self.map, text, 0o644)
        self.proc.send_signal(signal.SIGHUP)
        words = "read again" if rails is not None else "not taken"
        if not self.said_since(mark, words, 30):
            fail(f"{turn}: the agent did not say '{words}': {self.log.read_text()[mark:][-1500:]}")
        if rails is not None:
            self.rails = rails
        if self.alive(turn):
            self.healthy(turn, self.rails)

    def plant(self) -> None:
        kind = random.choice(["symlink", "directory", "fifo"])
        turn = f"plant: a {kind} at the state path"
        mark = len(self.log.read_text())
        self.state.unlink(missing_ok=True)
        if kind == "symlink":
            self.state.symlink_to(self.d / "elsewhere")
        elif kind == "directory":
            self.state.mkdir()
        else:
            os.mkfifo(self.state)
        if not self.said_since(mark, "not written", 3 * WINDOW_S + 10):
            fail(f"{turn}: the failed write was not said")
        self.scrapes(turn)
        self.state.rmdir() if kind == "directory" else self.state.unlink()
        if self.alive(turn):
            self.healthy(turn)

    def full_disk(self) -> None:
        turn = "full disk"
        if not self.tmpfs:
            self.counts["full disk (skipped: no tmpfs mount here)"] = 1
            return
        mark = len(self.log.read_text())
        filler = self.state_dir / "filler"
        left = sorted(p.name for p in self.state_dir.iterdir())
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        if not filler.exists():
            fail(f"{turn}: the tmpfs was full before it was filled: {left}")
            return
        if not self.said_since(mark, "No space left", 3 * WINDOW_S + 10):
            fail(f"{turn}: the full disk was not said: {self.log.read_text()[mark:][-800:]}")
        self.scrapes(turn)
        filler.unlink()
        if self.alive(turn):
            self.healthy(turn)

    def web_change(self) -> None:
        changes = ["password", "require a client certificate", "no client certificate", "broken"]
        change = random.choice(changes)
        turn = f"web config: {change}"
        if change == "broken":
            replace(self.web, web_config(self.d, self.password, self.require_cert, broken=True))
            if not until(lambda: self.scraper.get(self.password, cert=self.require_cert) != 200, 15):
                fail(f"{turn}: a config that does not load still let scrapes in")
            replace(self.web, web_config(self.d, self.password, self.require_cert))
        else:
            old_password = self.password
            if change == "password":
                self.password = random.choice([p for p in ("second", "third", "first") if p != old_password])
            else:
                self.require_cert = change.startswith("require")
            replace(self.web, web_config(self.d, self.password, self.require_cert))
            refused = lambda: self.scraper.get(old_password, cert=self.require_cert) == 401  # noqa: E731
            if change == "password" and not until(refused, 15):
                fail(f"{turn}: the old password was still let in 15 s after the change")
        if self.require_cert and not until(lambda: self.scraper.get(self.password, cert=False) != 200, 15):
            fail(f"{turn}: a client without a certificate still got in 15 s after one was required")
        if not until(lambda: self.scraper.get(self.password, cert=self.require_cert) == 200, 15):
            fail(f"{turn}: the new config's credentials were not let in within 15 s")
        if self.alive(turn):
            self.scrapes(turn)

    def slow_clients(self) -> None:
        turn = "slow clients: twelve trickling their headers"
        held = []
        ctx = ssl.create_default_context(cafile=str(self.d / "node.crt"))
        for _ in range(12):  # each past its handshake, its request line and one header sent, no more
            try:
                s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=5),
                                    server_hostname="127.0.0.1")  # fmt: skip
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n")
                held.append(s)
            except (OSError, ssl.SSLError):
                break
        try:
            t0 = time.monotonic()
            got = self.scraper.get(self.password, cert=self.require_cert, timeout=10)
            if got != 200:
                fail(f"{turn}: a scrape beside them got {got} after {time.monotonic() - t0:.1f} s")
        finally:
            for s in held:
                s.close()
        self.alive(turn)

    def run(self) -> int:
        self.start()
        turns = [self.reload, self.plant, self.full_disk, self.web_change, self.slow_clients]
        first = footprint(self.proc.pid)
        say(f"agent {self.proc.pid} ready: {first}; soak for {SOAK_S:.0f} s; tmpfs: {self.tmpfs}")
        end = time.monotonic() + SOAK_S
        while time.monotonic() < end and self.proc.poll() is None:
            turn = random.choice(turns)
            before = len(failures)
            turn()
            name = turn.__name__
            self.counts[name] = self.counts.get(name, 0) + 1
            say(f"{name}: {'ok' if len(failures) == before else 'FAILED'}")
        # back to the first map and a config as at the start, then the footprint is compared
        replace(self.map, maps()[0][1], 0o644)
        self.proc.send_signal(signal.SIGHUP)
        self.rails = 2
        self.healthy("the end", 2)
        last = footprint(self.proc.pid) if self.proc.poll() is None else {}
        say(f"footprint: first {first}, last {last}")
        if last and (last["fds"] != first["fds"] or abs(last["threads"] - first["threads"]) > 1
                     or last["rss_mb"] - first["rss_mb"] > RSS_MB):  # fmt: skip
            fail(f"the footprint grew: {first} -> {last}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            fail("SIGTERM did not stop the agent within 60 s")
        if code != 0:
            fail(f"the agent's exit after SIGTERM: {code}")
        say(f"turns: {self.counts}")
        return code

    def close(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.tmpfs:
            subprocess.run(["umount", str(self.state_dir)], capture_output=True)


def main() -> int:
    random.seed(int(os.environ.get("SOAK_SEED", "70")))
    d = Path(tempfile.mkdtemp(prefix="rdmacli-agent-soak-"))
    soak = Soak(d)
    try:
        soak.run()
    finally:
        soak.close()
        if not failures:
            shutil.rmtree(d, ignore_errors=True)
    print(f"agent soak: {len(failures)} failures in {SOAK_S:.0f} s" + (f" (kept {d})" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
