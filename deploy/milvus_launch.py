"""Run the `milvus-server` entry point of the PyPI package milvus==2.3.5 with
three small fixes to its port handling. Used by deploy/start-milvus.sh; takes
exactly the same arguments as `milvus-server`.

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
"""

import os
import socket
import sys

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


if __name__ == "__main__":
    sys.argv[0] = "milvus-server"
    _patch()
    sys.exit(milvus.main())
