"""Run the `milvus-server` entry point of the PyPI package milvus==2.3.5 with
three small fixes to its port handling, reachable only from this host's
loopback. Used by deploy/start-milvus.sh; takes exactly the same arguments as
`milvus-server`.

Loopback only: Milvus 2.3.5 listens on every interface (`net.Listen("tcp",
":port")` for the proxy and each component; no setting binds them to an
address). So Milvus runs in a network namespace of its own, which has only a
loopback interface, and this process forwards two ports of the host's
127.0.0.1 into it: the proxy (--proxy-port) and the health/metrics port. No
other Milvus listener (components, embedded etcd) can be reached from outside
that namespace. As root the namespace is a plain network namespace, otherwise
one inside a user namespace of the calling user. Where neither can be made the
start fails; FRESHET_MILVUS_LISTEN_ALL=1 starts Milvus in the host's namespace,
listening on every interface (only behind a firewall that keeps its ports
private).

1. The wrapper probes ports with bind() *without* SO_REUSEADDR, so a port that
   only has TCP TIME_WAIT leftovers of the previous run (up to 60 s after a
   stop; the wrapper itself polls /healthz 10x per second) looks busy and the
   wrapper silently moves that component to the next port. The Go binary binds
   with SO_REUSEADDR and would have been fine. Probing with SO_REUSEADDR still
   fails when another process is *listening* on the port.
2. The proxy port (--proxy-port) is made strict: fail instead of moving it.
3. The health/metrics port (FRESHET_MILVUS_HEALTH_PORT, default 9091, or the
   next free one) never lands on a port listed in FRESHET_MILVUS_AVOID_PORTS
   (comma separated; start-milvus.sh puts the Kafka ports there).

Search threads at Milvus' own priority: knowhere, Milvus' vector library, starts
every thread of its pools at nice 19, its search threads included, so that inside
Milvus a vector search waits behind all of Milvus' other work (inserts, time
ticks, flushes, compaction) and, where Milvus shares a scheduling group with
other programs, behind those too. While Milvus runs, this process sets each
`Knowhere_Search` thread to FRESHET_MILVUS_SEARCH_NICE (default: the nice value
Milvus was started at) as it appears; index builds (`Knowhere_Build*`) keep 19.
Raising a thread's priority needs CAP_SYS_NICE (root outside a user namespace)
or an RLIMIT_NICE that allows it (`ulimit -e`); without either, a warning says
so once and the threads stay at 19 (docs/benchmarks.md, "Query load during
ingest"). FRESHET_MILVUS_SEARCH_NICE=19 leaves them as knowhere sets them.
"""

import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import sys
import threading
import time

import milvus

EXPECTED_VERSION = "2.3.5"
STRICT_KEYS = ("proxy_port",)


def _avoid_ports():
    out = set()
    for item in os.environ.get("FRESHET_MILVUS_AVOID_PORTS", "").split(","):
        item = item.strip()
        if item.isdigit():
            out.add(int(item))
    return out


def _patch():
    cfg_cls = getattr(milvus, "MilvusServerConfig", None)
    needed = ("try_bind_port", "resolve_port", "resolve_all_listen_ports")
    if getattr(milvus, "__version__", None) != EXPECTED_VERSION or cfg_cls is None or not all(
        hasattr(cfg_cls, name) for name in needed
    ):
        print(
            f"milvus_launch: milvus {getattr(milvus, '__version__', '?')} is not {EXPECTED_VERSION}; "
            "running milvus-server unpatched",
            file=sys.stderr,
        )
        return

    avoid = _avoid_ports()

    def try_bind_port(self, port):
        if port in avoid:
            return None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return sock
        except OSError:
            sock.close()
            return None

    orig_resolve_all = cfg_cls.resolve_all_listen_ports

    def resolve_all_listen_ports(self):
        for key in STRICT_KEYS:
            if key not in self.configs and key in self.configurable_items:
                self.configs[key] = self.configurable_items[key][1]
        try:
            return orig_resolve_all(self)
        except RuntimeError as err:
            print(f"milvus_launch: {err}", file=sys.stderr, flush=True)
            raise

    cfg_cls.try_bind_port = try_bind_port
    cfg_cls.resolve_all_listen_ports = resolve_all_listen_ports

    # The servers main() picks from are made when the module is imported.
    health = os.environ.get("FRESHET_MILVUS_HEALTH_PORT", "").strip()
    if health.isdigit():
        for name in ("default_server", "debug_server"):
            server = getattr(milvus, name, None)
            if server is not None:
                server.webservice_port = int(health)


SEARCH_THREADS = "Knowhere_Search"


def _search_nice():
    """FRESHET_MILVUS_SEARCH_NICE, else this process's own nice value."""
    value = os.environ.get("FRESHET_MILVUS_SEARCH_NICE", "").strip()
    if not value:
        return os.getpriority(os.PRIO_PROCESS, 0)
    try:
        nice = int(value)
    except ValueError:
        nice = None
    if nice is None or not -20 <= nice <= 19:
        _fail(f"FRESHET_MILVUS_SEARCH_NICE={value!r} is not a nice value (-20 to 19)")
    return nice


def _descendants(root):
    """The pids of every process below `root`."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _search_threads(pids):
    """The thread ids of `pids` whose name starts with SEARCH_THREADS."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read()
            except OSError:
                continue
            if name.startswith(SEARCH_THREADS):
                yield int(tid)


def _keep_search_priority(nice):
    """Once a second, sets every knowhere search thread below this process to `nice` (they
    appear as Milvus first searches, and knowhere lowers each to 19 when it starts it); stops
    with a warning where raising a thread's priority is not permitted."""
    pids, rounds = [], 0
    while True:
        # Milvus' processes are looked up again every 10 s (or until there are any).
        if not pids or rounds % 10 == 0:
            pids = _descendants(os.getpid())
        rounds += 1
        for tid in _search_threads(pids):
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
            except ProcessLookupError:
                continue
            except PermissionError:
                print(
                    f"milvus_launch: WARNING: cannot raise Milvus' search threads from nice 19 "
                    f"(knowhere's) to {nice}: not permitted (needs CAP_SYS_NICE, or "
                    f"`ulimit -e` of at least {20 - nice}); vector searches wait behind "
                    "Milvus' other work while it ingests",
                    file=sys.stderr,
                    flush=True,
                )
                return
        time.sleep(1)


CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1


def _fail(msg):
    print(f"milvus_launch: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def _arg(name):
    """The value of `--name VALUE` or `--name=VALUE` in sys.argv, or None."""
    for i, a in enumerate(sys.argv):
        if a == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.listen(128)
    return s


def _unshare_net():
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0 and libc.unshare(CLONE_NEWNET) == 0:
        return
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        _fail(
            f"cannot give Milvus a network namespace of its own ({os.strerror(err)}); "
            "Milvus 2.3.5 would listen on every interface. Allow (user) network namespaces, "
            "or set FRESHET_MILVUS_LISTEN_ALL=1 where a firewall keeps its ports private"
        )
    for path, text in (
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", f"0 {uid} 1"),
        ("/proc/self/gid_map", f"0 {gid} 1"),
    ):
        with open(path, "w") as f:
            f.write(text)


def _loopback_up():
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b"\0" * 14))
    finally:
        s.close()


def _pump(src, dst):
    try:
        while True:
            data = src.recv(262144)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            sock.shutdown(how)
        except OSError:
            pass


def _serve(listener, port):
    """Accepts on the host's loopback, connects inside the namespace (sockets made after the
    unshare belong to it)."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            raise
        try:
            inner = socket.create_connection(("127.0.0.1", port), timeout=5)
            inner.settimeout(None)
        except OSError:
            client.close()
            continue
        for sock in (client, inner):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def run(a=client, b=inner):
            t = threading.Thread(target=_pump, args=(b, a), daemon=True)
            t.start()
            _pump(a, b)
            t.join()
            a.close()
            b.close()

        threading.Thread(target=run, daemon=True).start()


def _isolate():
    """Moves this process into a network namespace with only a loopback interface, forks: the
    child goes on to run Milvus there, this process forwards the proxy and health ports from the
    host's 127.0.0.1 until the child exits, then exits with its status."""
    proxy = _arg("--proxy-port")
    if proxy is None or not proxy.isdigit():
        _fail("--proxy-port is required")
    proxy = int(proxy)
    health = os.environ.get("FRESHET_MILVUS_HEALTH_PORT", "9091").strip()
    health = int(health) if health.isdigit() else 9091
    proxy_listener = _listen(proxy)
    if proxy_listener is None:
        _fail(f"127.0.0.1:{proxy} is taken")
    avoid = _avoid_ports() | {proxy}
    health_listener = None
    for port in range(health, health + 1000):
        if port in avoid:
            continue
        health_listener = _listen(port)
        if health_listener is not None:
            health = port
            break
    if health_listener is None:
        _fail(f"no free port for the health endpoint from {health}")
    # Inside, every port is free: the wrapper keeps this one.
    os.environ["FRESHET_MILVUS_HEALTH_PORT"] = str(health)
    _unshare_net()
    _loopback_up()
    child = os.fork()
    if child == 0:
        proxy_listener.close()
        health_listener.close()
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        return
    print(
        f"milvus_launch: milvus in its own network namespace; forwarding 127.0.0.1:{proxy} "
        f"(proxy) and 127.0.0.1:{health} (health) into it",
        file=sys.stderr,
        flush=True,
    )
    for listener, port in ((proxy_listener, proxy), (health_listener, health)):
        threading.Thread(target=_serve, args=(listener, port), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    sys.exit(os.waitstatus_to_exitcode(status) if status else 0)


if __name__ == "__main__":
    sys.argv[0] = "milvus-server"
    if os.environ.get("FRESHET_MILVUS_LISTEN_ALL", "") != "1":
        _isolate()
    _patch()
    search_nice = _search_nice()
    if search_nice != 19:
        threading.Thread(target=_keep_search_priority, args=(search_nice,), daemon=True).start()
    sys.exit(milvus.main())
