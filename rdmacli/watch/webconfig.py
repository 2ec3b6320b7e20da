"""The /metrics endpoint's web configuration, in Prometheus exporter-toolkit's format (the file
node_exporter takes as `--web.config.file`), so a fleet reuses the one it has: TLS 1.2 or newer,
client certificates (and which names may present one), bcrypt basic auth.

The file is untrusted input like any other: at most MAX_BYTES, YAML's safe loader, every key
known (an unknown or unsupported one is refused by name, as exporter-toolkit refuses it: a typo
in a security setting must not silently turn it off). It is read again when it or a file it names
changes (stat, at most once a second), so a rotated certificate or a changed password needs no
restart; a change that does not load fails scrapes closed (Prometheus sees the target down) and
is said once, and whether the endpoint speaks TLS at all is fixed at start."""

from __future__ import annotations

import hashlib
import os
import ssl
import stat
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

MAX_BYTES = 64 * 1024
MAX_USERS = 256
HASH_HOWTO = "$2y$ or $2b$ and 60 characters: htpasswd -nBC 10 NAME, or python3's bcrypt.hashpw"
RECHECK_S = 1.0
AUTH_CACHE = 256  # credentials checked, good or bad, by digest: bcrypt costs ~50 ms a check

# exporter-toolkit's client_auth_type; the two that ask for a certificate without verifying it
# have no Python equivalent and are refused in words
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class _TlsKeys:
    """tls_server_config's keys as exporter-toolkit names them, as the file says them (unchecked:
    `_tls` checks each); a key not here is refused by name."""

    cert_file: Any = None
    key_file: Any = None
    client_auth_type: Any = "NoClientCert"
    client_ca_file: Any = None
    client_allowed_sans: Any = None
    min_version: Any = "TLS12"


@dataclass(frozen=True)
class _FileKeys:
    """The file's own keys (exporter-toolkit's that rdmacli supports)."""

    tls_server_config: Any = None
    basic_auth_users: Any = None


TLS_KEYS = frozenset(f.name for f in fields(_TlsKeys))
FILE_KEYS = frozenset(f.name for f in fields(_FileKeys))


class WebConfigError(ValueError):
    """The file, or a file it names, that does not load: its words name the key or the file."""


@dataclass(frozen=True)
class Tls:
    certfile: str
    keyfile: str
    client_cafile: str | None = None
    verify: ssl.VerifyMode = ssl.CERT_NONE
    allowed_sans: frozenset[str] = frozenset()  # empty: any name a verified certificate has
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        try:
            ctx.load_cert_chain(self.certfile, self.keyfile)
            if self.client_cafile:
                ctx.load_verify_locations(cafile=self.client_cafile)
        except ssl.SSLError as exc:
            raise WebConfigError(f"tls_server_config: {exc.reason or exc}") from None
        ctx.verify_mode = self.verify
        return ctx

    def admits(self, cert: Mapping | None) -> bool:
        """A verified client certificate's subjectAltNames against client_allowed_sans."""
        if not self.allowed_sans:
            return True
        names = {str(v) for _, v in (cert or {}).get("subjectAltName", ())}
        return bool(names & self.allowed_sans)


@dataclass(frozen=True)
class WebConfig:
    tls: Tls | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # name -> bcrypt hash

    def summary(self) -> str:
        """What the configuration lets in, in words for the log (no secret in them)."""
        t = self.tls
        if t is None:
            said = "plain HTTP"
        else:
            auth = next(name for name, mode in CLIENT_AUTH.items() if mode == t.verify)
            names = f", {len(t.allowed_sans)} allowed names" if t.allowed_sans else ""
            said = f"TLS ({auth}{names})"
        return f"{said}, {len(self.users) or 'no'} basic-auth user(s)"

    def files(self) -> tuple[str, ...]:
        t = self.tls
        return tuple(p for p in ((t.certfile, t.keyfile, t.client_cafile) if t else ()) if p)


def _str(value, key: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or "\0" in value:
        raise WebConfigError(f"{key}: a non-empty string")
    return value


def trusted(path: str, what: str) -> int:
    """`path` opened for reading (never blocking: a FIFO is refused, not waited on), or a
    WebConfigError: a regular file that only root or this agent's user owns and may write. Whoever
    else can write the web config or a file it names decides who scrapes (`{}` from another user
    opened /metrics to all), so such a file is refused as a key file others may read is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise WebConfigError(f"{what}: {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    owner = st.st_uid in (0, os.geteuid())
    why = (
        "not a regular file" if not stat.S_ISREG(st.st_mode)
        else f"owned by uid {st.st_uid}, neither root nor this agent's user" if not owner
        else f"mode {stat.S_IMODE(st.st_mode):04o}: others may write it" if st.st_mode & 0o022
        else None
    )  # fmt: skip
    if why:
        os.close(fd)
        raise WebConfigError(f"{what}: {path}: {why}")
    return fd


def _path(value, key: str, base: str) -> str:
    path = os.path.join(base, _str(value, key))  # relative to the file, as exporter-toolkit reads it
    os.close(trusted(path, key))  # ssl would say a missing file without its name, and wait on a FIFO
    return path


def _tls(doc, base: str) -> Tls:
    if not isinstance(doc, dict):
        raise WebConfigError("tls_server_config: a mapping")
    unknown = set(doc) - TLS_KEYS
    if unknown:
        raise WebConfigError(f"tls_server_config: {', '.join(sorted(map(str, unknown)))} not supported")
    t = _TlsKeys(**doc)
    if t.cert_file is None or t.key_file is None:
        raise WebConfigError("tls_server_config: needs cert_file and key_file")
    auth = t.client_auth_type
    if not isinstance(auth, str) or auth not in CLIENT_AUTH:
        said = ", ".join(CLIENT_AUTH)
        raise WebConfigError(f"client_auth_type: {str(auth)[:40]!r} not supported (one of {said})")
    ca = _path(t.client_ca_file, "client_ca_file", base) if t.client_ca_file else None
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and ca is None:
        raise WebConfigError(f"client_auth_type {auth} needs client_ca_file")
    sans = t.client_allowed_sans or []
    if not isinstance(sans, list) or len(sans) > MAX_USERS:
        raise WebConfigError("client_allowed_sans: a list of names")
    if sans and CLIENT_AUTH[auth] != ssl.CERT_REQUIRED:
        raise WebConfigError("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    version = t.min_version
    if not isinstance(version, str) or version not in VERSIONS:
        raise WebConfigError(f"min_version: {str(version)[:20]!r} not supported (TLS12 or TLS13)")
    names = frozenset(_str(s, "client_allowed_sans") for s in sans)
    cert, key = _path(t.cert_file, "cert_file", base), _path(t.key_file, "key_file", base)
    return Tls(cert, key, ca, CLIENT_AUTH[auth], names, VERSIONS[version])


def _users(doc) -> dict[str, bytes]:
    if not isinstance(doc, dict) or len(doc) > MAX_USERS:
        raise WebConfigError(f"basic_auth_users: a mapping of at most {MAX_USERS} names to bcrypt hashes")
    users = {}
    for name, hashed in doc.items():
        name = _str(name, "basic_auth_users")
        if ":" in name:
            raise WebConfigError("basic_auth_users: a name with ':' cannot be sent in basic auth")
        hashed = _str(hashed, f"basic_auth_users: {name[:40]}")
        if not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
            raise WebConfigError(f"basic_auth_users: {name[:40]}: not a bcrypt hash ({HASH_HOWTO})")
        users[name] = hashed.encode()
    return users


def load(path: str) -> WebConfig:
    """Read and check the file; every problem a WebConfigError in words."""
    import yaml

    fd = trusted(path, "--web-config-file")
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise WebConfigError(f"{path}: larger than {MAX_BYTES // 1024} KiB")
    try:
        doc = yaml.safe_load(raw) or {}
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: not YAML: {str(exc).splitlines()[0][:120]}") from None
    if not isinstance(doc, dict):
        raise WebConfigError(f"{path}: a mapping (tls_server_config, basic_auth_users)")
    unknown = set(doc) - FILE_KEYS
    if unknown:
        raise WebConfigError(f"{path}: {', '.join(sorted(map(str, unknown)))} not supported by rdmacli")
    base = os.path.dirname(os.path.abspath(path))
    given = _FileKeys(**doc)
    tls = _tls(given.tls_server_config, base) if given.tls_server_config else None
    users = _users(given.basic_auth_users) if given.basic_auth_users else {}
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise WebConfigError("basic_auth_users needs bcrypt: pip install 'rdmacli[web]'") from None
    return WebConfig(tls, users)


class WebSource:
    """The file as it stands: `current()` reloads it when it or a file it names changed."""

    def __init__(self, path: str, log=None) -> None:
        self.path = path
        self.log = log or (lambda words: print(f"watch: {words}", file=sys.stderr, flush=True))
        self.lock = threading.Lock()
        self.config = load(path)  # at start a problem is the caller's to say (exit 2)
        self.error: str | None = None
        self.stamp = self._stamp(self.config)
        self.checked = time.monotonic()
        self.contexts: dict[int, ssl.SSLContext] = {}
        self.seen: dict[bytes, bool] = {}  # credential digests checked (good or not), oldest first
        self.checking = threading.Lock()  # one bcrypt check at a time

    def _stamp(self, config: WebConfig) -> tuple:
        out: list[tuple] = []
        for p in (self.path, *config.files()):
            try:
                st = os.stat(p)
                out.append((p, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((p, None))
        return tuple(out)

    def current(self) -> WebConfig:
        """The configuration to serve with now; raises WebConfigError while a change does not load."""
        with self.lock:
            now = time.monotonic()
            if now - self.checked >= RECHECK_S:
                self.checked = now
                if self._stamp(self.config) != self.stamp or self.error:
                    self._reload()
            if self.error:
                raise WebConfigError(self.error)
            return self.config

    def _reload(self) -> None:
        try:
            config = load(self.path)
            if (config.tls is None) != (self.config.tls is None):
                raise WebConfigError("TLS turned on or off: takes a restart of the agent")
            if config.tls is not None:
                config.tls.context()  # a certificate that does not load is said now, not per client
        except WebConfigError as exc:
            if str(exc) != self.error:
                self.log(f"--web-config-file {self.path}: {exc}; scrapes refused until it loads")
            self.error = str(exc)
            self.stamp = ()
            return
        self.log(f"--web-config-file {self.path}: {'loads again' if self.error else 'read again'}, "
                 f"in force from the next client: {config.summary()}")  # fmt: skip
        self.config, self.error, self.stamp = config, None, self._stamp(config)
        self.contexts.clear()
        self.seen.clear()

    def context(self) -> ssl.SSLContext:
        config = self.current()
        assert config.tls is not None
        ctx = self.contexts.get(id(config))
        if ctx is None:
            ctx = self.contexts[id(config)] = config.tls.context()
        return ctx

    def authorized(self, header: str | None) -> bool:
        """An `Authorization: Basic` header against basic_auth_users (anyone, where there are none)."""
        import base64

        users = self.current().users
        if not users:
            return True
        user, password = "", b""
        if header and header[:6].lower() == "basic ":
            try:
                user, _, pw = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
                password = pw.encode()
            except (ValueError, UnicodeDecodeError):
                user = ""
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), hashed or b"", password))).digest()
        known = self.seen.get(key)
        if known is not None:  # a credential checked before, good or bad: no bcrypt again
            return known
        import bcrypt

        # an unknown name costs a check too: the time taken says nothing of which names exist;
        # one check at a time, so clients with wrong passwords cost one core at most, not one each
        with self.checking:
            known = self.seen.get(key)  # checked by another client while this one waited
            if known is not None:
                return known
            ok = bcrypt.checkpw(password[:72], hashed or _DUMMY) and hashed is not None
            with self.lock:
                self.seen[key] = ok
                while len(self.seen) > AUTH_CACHE:
                    self.seen.pop(next(iter(self.seen)))
        return ok


_DUMMY = b"$2b$10$W.8f01K/SDLpcVsyWNN4DuEbBUIQ5pA1QfWyZznNs7JqZXe0w1TRe"  # a valid hash, of no password
