"""How the ranks of one all-reduce find each other without opening a root-run suite to the network.

torch.distributed's TCPStore has no authentication, and a master store listens on every
interface (`*:<port>`) even when given 127.0.0.1; gloo and NCCL open listeners of their own on
the interface they pick. So:

* One node (checks/allreduce through run_local, `worker` without other nodes): a FileStore in a
  fresh 0700 directory (mkdtemp) and the collectives' sockets on the loopback interface. Nothing
  listens beyond this host.
* Several nodes (on-demand group check, registration batches): the host launcher runs the real
  TCPStore on 127.0.0.1 only (a socket it bound itself, handed to torch as master_listen_fd) and
  exposes it through a relay bound to its cluster address only. Every other launcher reaches it
  through a relay of its own on 127.0.0.1 that proves the per-run secret first: an HMAC
  challenge both ways, so a peer without the secret is closed before it can read or write one
  key (it cannot join, nor poison the rendezvous), and a member never talks to an impostor host.
  gloo/NCCL sockets bind to the interface of the cluster address (GLOO_SOCKET_IFNAME,
  NCCL_SOCKET_IFNAME).

The secret is written root-only (0600, in a 0700 folder) through the batch's or the
reservation's shared directory, or handed down srun's environment (AIRLOCK_DIST_SECRET) where no
shared directory is configured. What stays open is documented in docs/security.md: the store's
loopback port on the host node, and the collectives' own data sockets on the cluster interface,
whose data every rank verifies element by element.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import ipaddress
import os
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airlock.errors import Unmeasured

SECRET_ENV = "AIRLOCK_DIST_SECRET"
HELLO = b"AIRLOCK-STORE-1\n"
# Sent instead of HELLO when the relay has no handshake slot for this source right now: the
# member tries again shortly (a refused secret is a close without a word, never BUSY).
BUSY = b"AIRLOCK-BUSY-01\n"
NONCE = 32
HANDSHAKE_TIMEOUT = 10.0
# Handshakes in flight at once, in all and per source address. A slot is held only while a
# connection proves the secret (milliseconds for a member; at most HANDSHAKE_TIMEOUT for a peer
# that says nothing), never for the life of the connection it admits: a group of any size passes
# through a few slots. A connection beyond either limit is answered BUSY and closed at once,
# so idle sockets from one source can neither stall the accept loop nor take every slot.
MAX_PENDING = 256
MAX_PENDING_PER_SOURCE = 32
# Slots are per source address, and a member shares its address with whatever else runs on its
# node (or behind its NAT): held for HANDSHAKE_TIMEOUT, 32 silent sockets from there locked the
# member out. A member answers HELLO within milliseconds, so when a source (or the relay) is
# full, its oldest handshake still unfinished this long after its accept is evicted (closed)
# to admit the newcomer; a younger one is never evicted, so a member's handshake always gets
# this long to finish.
IDLE_EVICT_S = 1.0
BUSY_RETRY_S = (0.05, 1.0)  # a member's back-off after BUSY: first wait, longest wait


class RendezvousError(Unmeasured):
    """The group cannot meet safely (no secret, a refused secret, no cluster interface): no
    measurement of anyone, so no verdict on anyone."""


class SecretUnavailable(RendezvousError):
    """The run's secret file cannot be read here: none left by the leader, root_squash
    (EACCES), a stale NFS handle (ESTALE). This member cannot take part; its node is not the
    cause."""


# --- the secret -----------------------------------------------------------------------------
def new_secret() -> str:
    return secrets.token_hex(32)


def read_secret_file(path: str) -> bytes:
    """The secret in path: a regular file (not a link), owned by root or this user, that nobody
    else may read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretUnavailable(f"secret file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RendezvousError(f"secret file {path}: not a regular file")
        if st.st_uid not in (0, os.geteuid()):
            raise RendezvousError(f"secret file {path}: owned by uid {st.st_uid}, not root")
        if st.st_mode & 0o077:
            raise RendezvousError(f"secret file {path}: mode {stat.S_IMODE(st.st_mode):04o}, "
                                  "must be 0600")
        data = fh.read(4097).strip()
    return check_secret(data, f"secret file {path}")


def check_secret(data: bytes, where: str) -> bytes:
    if not 16 <= len(data) <= 4096:
        raise RendezvousError(f"{where}: not a secret (16 to 4096 bytes)")
    return data


def secret_from(path: str = "") -> bytes | None:
    """The run's secret: from path when given, else from $AIRLOCK_DIST_SECRET, else None."""
    if path:
        return read_secret_file(path)
    value = os.environ.get(SECRET_ENV, "").strip()
    return check_secret(value.encode(), f"${SECRET_ENV}") if value else None


def _mac(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, role + b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        buf += chunk
    return buf


def server_handshake(sock: socket.socket, secret: bytes) -> bool:
    """The host's side: True when the peer proved the secret (and got our proof back)."""
    nonce = secrets.token_bytes(NONCE)
    sock.sendall(HELLO + nonce)
    theirs = _recv_exact(sock, NONCE)
    proof = _recv_exact(sock, 32)
    if not hmac.compare_digest(proof, _mac(secret, b"member", nonce, theirs)):
        return False
    sock.sendall(_mac(secret, b"host", theirs, nonce))
    return True


class Busy(ConnectionError):
    """The host relay had no handshake slot for us: try again shortly."""


def client_handshake(sock: socket.socket, secret: bytes) -> None:
    """A member's side; RendezvousError when the host refuses us or cannot prove the secret,
    Busy when it has no handshake slot for us right now."""
    first = _recv_exact(sock, len(HELLO))
    if first == BUSY:
        raise Busy("the group's host relay is busy")
    hello = first + _recv_exact(sock, NONCE)
    if not hello.startswith(HELLO):
        raise RendezvousError("the group's host does not speak Airlock's rendezvous")
    nonce = hello[len(HELLO):]
    mine = secrets.token_bytes(NONCE)
    sock.sendall(mine + _mac(secret, b"member", nonce, mine))
    try:
        proof = _recv_exact(sock, 32)
    except ConnectionError:
        raise RendezvousError("the group's host refused this node's secret") from None
    if not hmac.compare_digest(proof, _mac(secret, b"host", mine, nonce)):
        raise RendezvousError("the group's host could not prove the run's secret")


# --- interfaces -----------------------------------------------------------------------------
def resolve(addr: str) -> str:
    """The IP address of a cluster address (Slurm's NodeAddr may be a host name)."""
    try:
        return str(ipaddress.ip_address(addr))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)[0][4][0]
    except (OSError, IndexError):
        raise RendezvousError(f"cannot resolve the cluster address {addr!r}") from None


def interface_of(addr: str) -> str:
    """The name of the interface that holds addr (lo for loopback)."""
    ip = ipaddress.ip_address(resolve(addr))
    if ip.is_loopback:
        return "lo"
    if ip.version == 4:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _idx, name in socket.if_nameindex():
                try:
                    got = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                      struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue
                if socket.inet_ntoa(got[20:24]) == str(ip):
                    return name
    else:
        try:
            with open("/proc/net/if_inet6") as fh:
                for line in fh:
                    f = line.split()
                    if len(f) >= 6 and ipaddress.ip_address(int(f[0], 16)) == ip:
                        return f[5]
        except OSError:
            pass
    raise RendezvousError(f"no interface here holds the cluster address {addr}")


# --- relays ---------------------------------------------------------------------------------
def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy a -> b until a closes, then close b's sending side."""
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _splice(a: socket.socket, b: socket.socket) -> None:
    t = threading.Thread(target=_pipe, args=(b, a), daemon=True, name="relay")
    t.start()
    _pipe(a, b)
    t.join()
    a.close()
    b.close()


class _Slot:
    """One handshake in flight: whose it is, since when, and its connection (to evict it)."""

    __slots__ = ("conn", "held", "since", "source")

    def __init__(self, source: str, conn: socket.socket, since: float):
        self.source, self.conn, self.since, self.held = source, conn, since, True


class _Relay:
    """Accepts on a bound socket; each connection is handled in a thread of its own. A handshake
    slot (see MAX_PENDING) is held from the accept until handle() calls admitted(), or until
    the connection is evicted (IDLE_EVICT_S)."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.port = listener.getsockname()[1]
        self.refused = 0  # connections that did not prove the secret
        self.busy = 0  # connections turned away for want of a handshake slot
        self.evicted = 0  # unfinished handshakes closed to admit a newcomer
        self._lock = threading.Lock()
        self._pending: dict[str, list[_Slot]] = {}  # source address -> handshakes in flight
        self._total = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="relay-accept")
        self._thread.start()

    def _accept(self) -> None:
        import time

        while not self._stop:
            try:
                conn, peer = self.listener.accept()
            except OSError:
                return
            source = peer[0] if isinstance(peer, tuple) else str(peer)
            now = time.monotonic()
            with self._lock:
                victim = self._victim(source, now)
                if victim is not None:
                    self._drop(victim)
                mine = self._pending.get(source, [])
                full = self._total >= MAX_PENDING or len(mine) >= MAX_PENDING_PER_SOURCE
                slot = None
                if not full:
                    slot = _Slot(source, conn, now)
                    self._pending.setdefault(source, []).append(slot)
                    self._total += 1
            if victim is not None:
                self.evicted += 1
                try:  # wakes its handler's recv: the handshake fails, its thread ends
                    victim.conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if slot is None:
                self.busy += 1
                _turn_away(conn)
                continue
            threading.Thread(target=self._run, args=(conn, slot), daemon=True,
                             name="relay-conn").start()

    def _victim(self, source: str, now: float) -> _Slot | None:
        """With the lock held: the handshake to evict for a newcomer from source, if a limit
        is reached and the oldest unfinished handshake that blocks it is old enough."""
        mine = self._pending.get(source, [])
        if len(mine) >= MAX_PENDING_PER_SOURCE:
            oldest = mine[0]
        elif self._total >= MAX_PENDING:
            oldest = min((q[0] for q in self._pending.values() if q), key=lambda s: s.since)
        else:
            return None
        return oldest if now - oldest.since >= IDLE_EVICT_S else None

    def _drop(self, slot: _Slot) -> None:
        """With the lock held: give slot back (once)."""
        if not slot.held:
            return
        slot.held = False
        self._total -= 1
        queue = self._pending.get(slot.source, [])
        queue.remove(slot)
        if not queue:
            self._pending.pop(slot.source, None)

    def _run(self, conn: socket.socket, slot: _Slot) -> None:
        try:
            self.handle(conn, lambda: self._release(slot))
        except Exception:  # one bad peer never stops the relay
            conn.close()
        finally:
            self._release(slot)

    def _release(self, slot: _Slot) -> None:
        """Give the connection's handshake slot back (once)."""
        with self._lock:
            self._drop(slot)

    def pending(self) -> int:
        with self._lock:
            return self._total

    def handle(self, conn: socket.socket, admitted) -> None:
        """Serve one connection; call admitted() once its handshake is over."""
        raise NotImplementedError

    def close(self) -> None:
        self._stop = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


def _turn_away(conn: socket.socket) -> None:
    try:
        conn.setblocking(False)
        conn.send(BUSY)
    except OSError:
        pass
    conn.close()


class HostRelay(_Relay):
    """On the host node: cluster address -> the store on 127.0.0.1, for peers with the secret."""

    def __init__(self, bind_addr: str, port: int, store_port: int, secret: bytes):
        ip = resolve(bind_addr)
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        self.store_port = store_port
        self.secret = secret
        super().__init__(sock)

    def handle(self, conn: socket.socket, admitted) -> None:
        conn.settimeout(HANDSHAKE_TIMEOUT)
        try:
            ok = server_handshake(conn, self.secret)
        except (OSError, ConnectionError):
            ok = False
        admitted()
        if not ok:
            self.refused += 1
            conn.close()
            return
        conn.settimeout(None)
        upstream = socket.create_connection(("127.0.0.1", self.store_port))
        _splice(conn, upstream)


class MemberRelay(_Relay):
    """On a member node: 127.0.0.1 -> the host's relay, proving the secret on every
    connection."""

    def __init__(self, host: str, port: int, secret: bytes):
        self.host, self.remote_port, self.secret = resolve(host), port, secret
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        super().__init__(sock)

    def connect(self, timeout: float = HANDSHAKE_TIMEOUT) -> socket.socket:
        """A connection to the host relay that proved the secret both ways; a BUSY host is
        asked again, backing off, for up to timeout seconds."""
        import time

        end = time.monotonic() + timeout
        wait = BUSY_RETRY_S[0]
        while True:
            sock = socket.create_connection((self.host, self.remote_port), timeout=timeout)
            try:
                client_handshake(sock, self.secret)
            except Busy:
                sock.close()
                if time.monotonic() + wait >= end:
                    raise
                time.sleep(wait * (0.5 + secrets.randbelow(1000) / 1000))
                wait = min(wait * 2, BUSY_RETRY_S[1])
                continue
            except BaseException:
                sock.close()
                raise
            sock.settimeout(None)
            return sock

    def probe(self, deadline_s: float) -> None:
        """Fail fast, with the reason, when the host refuses our secret; keep trying while it is
        not listening yet (members may start before the host)."""
        import time

        end = time.monotonic() + deadline_s
        while True:
            try:
                self.connect().close()
                return
            except (ConnectionRefusedError, TimeoutError, ConnectionError):
                if time.monotonic() >= end:
                    raise RendezvousError(f"the group's host {self.host}:{self.remote_port} "
                                          "never answered") from None
                time.sleep(0.2)

    def handle(self, conn: socket.socket, admitted) -> None:
        admitted()  # a local rank: nothing to prove here, the slot is not needed while we wait
        try:
            upstream = self.connect()
        except (OSError, RendezvousError):
            conn.close()
            return
        _splice(conn, upstream)


# --- the rendezvous of one launcher -----------------------------------------------------------
@dataclass
class Rendezvous:
    """What this launcher set up, and the spec its ranks connect with."""

    spec: dict[str, Any]
    store: Any = None  # the host's store (the launcher reads progress from it)
    folder: str = ""
    relay: _Relay | None = None

    @property
    def refused(self) -> int:
        return self.relay.refused if self.relay is not None else 0

    def client(self, world_size: int, timeout: float):
        """A store handle for the launcher itself (a member reads progress through it)."""
        return self.store if self.store is not None else connect(self.spec, world_size, timeout)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        self.store = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def local(world_size: int, timeout: float) -> Rendezvous:
    """Every rank on this node: a FileStore in a fresh root-only directory, loopback sockets."""
    import torch.distributed as dist

    folder = tempfile.mkdtemp(prefix="airlock-dist-")  # 0700, unpredictable name
    path = os.path.join(folder, "store")
    store = dist.FileStore(path, world_size + 1)
    return Rendezvous({"kind": "file", "path": path, "iface": "lo"}, store, folder)


def host(addr: str, port: int, world_size: int, timeout: float, secret: bytes) -> Rendezvous:
    """The host node of a multi-node group: the store on loopback, the relay on addr:port."""
    import torch.distributed as dist

    iface = interface_of(addr)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        store_port = listener.getsockname()[1]
        store = dist.TCPStore("127.0.0.1", store_port, world_size, True,
                              timeout=timedelta(seconds=timeout), wait_for_workers=False,
                              master_listen_fd=listener.fileno())
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns (and closes) the descriptor now
    try:
        relay = HostRelay(addr, port, store_port, secret)
    except BaseException:
        del store
        raise
    return Rendezvous({"kind": "tcp", "port": store_port, "iface": iface}, store, relay=relay)


def member(addr: str, port: int, timeout: float, secret: bytes) -> Rendezvous:
    """Another node of a multi-node group: a local relay that proves the secret to the host."""
    relay = MemberRelay(addr, port, secret)
    try:
        relay.probe(timeout)
        ip = ipaddress.ip_address(relay.host)
        iface = "lo" if ip.is_loopback else _route_interface(relay.host, port)
    except BaseException:
        relay.close()
        raise
    return Rendezvous({"kind": "tcp", "port": relay.port, "iface": iface}, relay=relay)


def _route_interface(host: str, port: int) -> str:
    """The interface this node reaches the host through (the kernel's route choice)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                       socket.SOCK_DGRAM) as s:
        s.connect((host, port))  # a UDP connect sends nothing; it only picks the route
        return interface_of(s.getsockname()[0])


def connect(spec: dict[str, Any], world_size: int, timeout: float):
    """A rank's (or its launcher's) handle on the store spec names."""
    import torch.distributed as dist

    if spec["kind"] == "file":
        return dist.FileStore(spec["path"], world_size + 1)
    return dist.TCPStore("127.0.0.1", int(spec["port"]), world_size, False,
                         timeout=timedelta(seconds=timeout))


def bind_collectives(spec: dict[str, Any]) -> None:
    """Before init_process_group, in the rank: gloo and NCCL listen on the spec's interface."""
    iface = spec.get("iface") or "lo"
    os.environ["GLOO_SOCKET_IFNAME"] = iface
    os.environ["NCCL_SOCKET_IFNAME"] = iface
