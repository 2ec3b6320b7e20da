"""A scripted fabric and an in-process launcher: `rdmacli mesh` driven through click, no subprocess.

`Fabric` joins the scripted RDMA stacks (fakerdma) of several in-process nodes: a connect
reaches the listener bound at its destination, private data crosses both ways, a send lands in
the peer's oldest receive, an RDMA WRITE or READ in the peer's memory region by its rkey, a
disconnect reaches the other end. `InProcessLaunch` is a mesh launcher (mesh.run.Launch's
interface) whose agents are the real ones (`run_agent` on the spec line a launcher would write),
each in a thread on its node's stack. It proves nothing about RDMA (the lab does): it lets the
unit suite drive the mesh's coordinator, contract and agents end to end. RC only.
"""

from __future__ import annotations

import errno
import itertools
import json
import threading
import time

from fakerdma import WC_OPCODE, FakeBackend, FakeCmId, wc

from rdmacli.engine.stops import Stops
from rdmacli.errors import Stopped
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import RdmaCallError

_ports = itertools.count(40000)


class FabricId(FakeCmId):
    def __init__(self, backend, channel, ps: int):
        super().__init__(backend, channel, ps)
        self.bound: tuple[str, int] | None = None
        self.src: str | None = None
        self.dst: tuple[str, int] | None = None
        self.peer: FabricId | None = None
        self.remote: tuple[str, int] | None = None
        self.pending: list[tuple] = []  # sends that came before a receive was posted

    def resolve_addr(self, src, dst, timeout_ms):
        self.src = src.host if src is not None else None
        self._call("resolve addr", dst)

    def local_addr(self):
        return self.bound or (self.src or self.backend.address, 0)

    def peer_addr(self):
        return self.remote or self.dst


class FabricBackend(FakeBackend):
    def __init__(self, fabric: Fabric, address: str):
        super().__init__()
        self.fabric, self.address = fabric, address
        self.mrs: list = []  # every region, for an RDMA WRITE or READ to find by its rkey

    def mr(self, cm, size: int, access: int):
        region = super().mr(cm, size, access)
        self.mrs.append(region)
        return region

    def create_id(self, channel, ps: int):
        cm = FabricId(self, channel, ps)
        self.ids.append(cm)
        return cm

    def react(self, cm, name: str, *args) -> None:
        fabric = self.fabric
        with fabric.lock:
            if name == "bind":
                sa = args[0]
                if sa.port and (sa.host, sa.port) in fabric.listeners:
                    raise RdmaCallError("rdma_bind_addr", errno.EADDRINUSE)
                cm.bound = (sa.host, sa.port)
            elif name == "listen":
                fabric.listeners[cm.bound] = cm
            elif name == "resolve addr":
                dst = args[0]
                cm.dst = (dst.host, dst.port)
                cm.src = cm.src or (cm.bound[0] if cm.bound else self.address)
                self.push(cm, C.ADDR_RESOLVED)
            elif name == "resolve route":
                self.push(cm, C.ROUTE_RESOLVED)
            elif name == "connect":
                fabric.connect(cm, args[0])
            elif name == "accept":
                peer, param = cm.peer, args[0]
                self.push(cm, C.ESTABLISHED)
                if peer is not None and peer.alive:
                    peer.backend.push(
                        peer, C.ESTABLISHED, private_data=(param.private_data if param else b"") or b""
                    )
            elif name == "reject":
                peer = cm.peer
                if peer is not None and peer.alive:
                    peer.backend.push(peer, C.REJECTED, 28, private_data=args[0] or b"")
            elif name == "disconnect":
                fabric.disconnect(cm)
            elif name == "destroy id":
                if fabric.listeners.get(cm.bound) is cm:
                    del fabric.listeners[cm.bound]
                if cm.peer is not None and not cm.peer_gone:
                    fabric.disconnect(cm, quiet=True)

    def post_recv(self, qp, wr_id, mr, offset=0, length=None, *, n=1):
        with self.fabric.lock:
            super().post_recv(qp, wr_id, mr, offset, length, n=n)
            cm = qp.cm
            while cm.pending and cm.recvs:
                self.fabric.land(cm, *cm.pending.pop(0))

    def post_send(self, qp, wr_id, mr, offset, length, *, opcode=C.WR_SEND, n=1, **kw):
        if length:
            mr._bounds(offset, length)
        with self.fabric.lock:
            cm = qp.cm
            for _ in range(n):
                self.fabric.carry(cm, mr, offset, length, opcode, kw)
            self.cqs[cm.key].complete(wc(wr_id, WC_OPCODE[opcode], byte_len=length, qp_num=qp.qp_num))


class Fabric:
    """Nodes' scripted stacks, joined. `cut` holds addresses whose requests go unanswered
    (a node off the network: UNREACHABLE for whoever asks it, or is asked by it); `links_cut` and
    `flaky` do the same for one link, for good or for its next requests."""

    def __init__(self):
        self.lock = threading.RLock()
        self.listeners: dict[tuple[str, int], FabricId] = {}
        self.backends: dict[str, FabricBackend] = {}
        self.cut: set[str] = set()
        self.links_cut: set[frozenset] = set()  # {address, address}: that link drops everything
        self.flaky: dict[frozenset, int] = {}  # {address, address}: its next N requests are lost

    def backend(self, address: str) -> FabricBackend:
        with self.lock:
            return self.backends.setdefault(address, FabricBackend(self, address))

    def connect(self, cm: FabricId, param) -> None:
        link = frozenset((cm.src, cm.dst[0]))
        lost = self.flaky.get(link, 0) > 0
        if lost:
            self.flaky[link] -= 1
        if cm.src in self.cut or cm.dst[0] in self.cut or link in self.links_cut or lost:
            cm.backend.push(cm, C.UNREACHABLE, -errno.ETIMEDOUT)
            return
        listener = self.listeners.get(cm.dst)
        if listener is None or not listener.alive:
            cm.backend.push(cm, C.REJECTED, 8)  # nothing listens there: the CM's reason 8
            return
        back = listener.backend
        new = FabricId(back, listener.channel, listener.ps)
        back.ids.append(new)
        new.bound, new.remote, new.peer, cm.peer = listener.bound, (cm.src, next(_ports)), cm, new
        ev = back.event(new, C.CONNECT_REQUEST, private_data=bytes(param.private_data or b""))
        ev.listen_id = listener.key
        listener.channel.push(ev)

    def disconnect(self, cm: FabricId, quiet: bool = False) -> None:
        peer = cm.peer
        if peer is not None and peer.alive and not peer.peer_gone:
            peer.peer_gone = True
            peer.backend.push(peer, C.DISCONNECTED)
        if not quiet and not cm.peer_gone:
            cm.backend.push(cm, C.DISCONNECTED)
        cm.peer_gone = True

    def mr(self, rkey: int):
        for back in self.backends.values():
            for mr in back.mrs:
                if mr.rkey == rkey and mr.alive:
                    return mr
        return None

    def carry(self, cm: FabricId, mr, offset: int, length: int, opcode: int, kw: dict) -> None:
        """One work request from cm's QP to its peer's."""
        peer = cm.peer
        if peer is None or not peer.alive or not peer.has_qp:
            return
        if opcode in (C.WR_RDMA_WRITE, C.WR_RDMA_WRITE_WITH_IMM, C.WR_RDMA_READ):
            target = self.mr(kw["rkey"])
            at = kw["remote_addr"] - target.addr
            if opcode == C.WR_RDMA_READ:
                mr.write(target.read(at, length), offset)
                return
            target.write(mr.read(offset, length), at)
            if opcode == C.WR_RDMA_WRITE:
                return
            data, imm, kind = b"", kw.get("imm"), C.WC_RECV_RDMA_WITH_IMM
            length_seen = length
        else:
            data = mr.read(offset, length) if length else b""
            imm, kind, length_seen = kw.get("imm"), C.WC_RECV, length
        if peer.recvs:
            self.land(peer, data, imm, kind, length_seen)
        else:
            peer.pending.append((data, imm, kind, length_seen))

    def land(self, cm: FabricId, data: bytes, imm, kind: int, length: int) -> None:
        wr_id, mr, offset, room = cm.recvs.pop(0)
        if data:
            mr.write(data[:room], offset)
        cm.backend.cqs[cm.key].complete(wc(wr_id, kind, byte_len=length, imm=imm, qp_num=cm.qp_num))


class InProcessLauncher:
    """Agents in threads, each on its node's stack, reading the spec a launcher writes."""

    def __init__(self, fabric: Fabric, spec_line: bytes, *, silent: set[str] = frozenset(), rails=None,
                 says: dict | None = None):  # fmt: skip
        self.fabric, self.spec_line, self.silent, self.rails = fabric, spec_line, set(silent), rails
        self.says = says or {}  # node -> lines its agent prints besides its records (a liar's)
        self.cut = self.abandoned = False
        self.configs: list = []
        self.stops: list[Stops] = []

    def run(self, on_line, on_exit, timeout: float, end_at=None, tick=None) -> None:
        from rdmacli.mesh.agent import AgentConfig, run_agent
        from rdmacli.mesh.contract import RunSpec
        from rdmacli.mesh.records import RailsRecord, StoppedRecord

        spec = RunSpec.from_line(self.spec_line)  # as an agent reads it
        lock = threading.Lock()

        def say(name: str, rec) -> None:
            with lock:
                on_line(name, json.dumps(rec.to_dict(), separators=(",", ":")), False)

        def agent(rank: int, name: str, stops: Stops) -> None:
            try:
                if spec.discover is not None:
                    rails = [
                        {"device": f"fake{k}", "port": 1, "address": a}
                        for k, a in enumerate(self.rails[name])
                    ]
                    say(name, RailsRecord(run=spec.run_id, rank=rank, rails=rails))
                    return
                for line in self.says.get(name, []):
                    with lock:
                        on_line(name, line.replace("RUN", spec.run_id), False)
                cfg = AgentConfig(spec, rank)
                self.configs.append(cfg)
                backend = self.fabric.backend(spec.addresses[rank][0])
                run_agent(
                    cfg,
                    lambda rec: say(name, rec),
                    backend=backend,
                    stops=stops,
                    stop=lambda: stops.requested,
                )
            except Stopped as exc:
                say(name, StoppedRecord(run=spec.run_id, rank=rank, signal=exc.signum))
            finally:
                with lock:
                    on_exit(name, 0)

        threads = []
        for rank, name in enumerate(spec.names):
            if name in self.silent:  # its agent never starts (not installed there, say)
                on_exit(name, 127)
                on_line(name, "bash: rdmacli: command not found", True)
                continue
            stops = Stops()
            self.stops.append(stops)
            t = threading.Thread(target=agent, args=(rank, name, stops), daemon=True)
            threads.append(t)
            t.start()
        backstop = time.monotonic() + timeout
        while any(t.is_alive() for t in threads) and time.monotonic() < backstop:
            if tick is not None:
                tick()
            if end_at is not None and time.monotonic() >= end_at():
                self.cut = True
                self.stop()
                break
            time.sleep(0.05)
        for t in threads:
            t.join(10)
        self.abandoned = any(t.is_alive() for t in threads)

    def go(self, text: str) -> None:
        for cfg in list(self.configs):
            cfg.take(text)

    def stop(self) -> None:
        for stops in self.stops:
            stops.stop()


class InProcessLaunch:
    """The mesh's launch (mesh.run.Launch's interface) for the in-process launcher."""

    launcher = "in-process"

    def __init__(self, fabric: Fabric, *, silent: set[str] = frozenset(), rails: dict | None = None,
                 says: dict | None = None):  # fmt: skip
        self.fabric, self.silent, self.rails, self.says = fabric, silent, rails, says
        self.launches: list[InProcessLauncher] = []

    def start(self, nodes_spec, spec, on_line, on_exit, timeout, end_at=None, tick=None):
        launcher = InProcessLauncher(self.fabric, spec.to_line(), silent=self.silent, rails=self.rails,
                                     says=self.says)  # fmt: skip
        self.launches.append(launcher)
        return launcher, lambda: launcher.run(on_line, on_exit, timeout, end_at, tick)
