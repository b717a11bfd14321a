"""A real etcd (Debian's etcd-server) for the tests of the coordination layer: one member on 127.0.0.1, with a data
directory of its own, started by the test and stopped by its PID. It stops by itself after ``lifetime`` seconds
(``timeout`` in front of it) should the test die first. It can be stopped and started again on the same data
directory and ports - the service going away mid-run, then coming back with its leases."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

ETCD = "/usr/bin/etcd"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EtcdServer:
    """``start()``, ``stop()``, ``url`` (the coordination URL of it), ``client_url``."""

    def __init__(self, directory, lifetime=1800):
        self.directory = str(directory)
        self.lifetime = lifetime
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc = None
        self.log = os.path.join(self.directory, "etcd.log")

    @property
    def client_url(self):
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def url(self):
        return f"etcd3+http://127.0.0.1:{self.client_port}/ogc-test"

    def start(self, wait=60):
        if not os.path.exists(ETCD):
            raise RuntimeError(f"{ETCD} is missing: install Debian's etcd-server (scripts/setup-system.sh does)")
        os.makedirs(self.directory, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                ["timeout", "--kill-after=10", str(self.lifetime), ETCD, "--name", "ogc-test",
                 "--data-dir", os.path.join(self.directory, "data"),
                 "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"ogc-test={peer}", "--logger", "zap", "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited ({self.proc.returncode}): {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.client_url}/health", timeout=2) as answer:
                    if json.load(answer).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"etcd did not answer within {wait} s: {self.tail()}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # timeout passes SIGTERM on to etcd
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def tail(self):
        try:
            with open(self.log, encoding="utf-8", errors="replace") as handle:
                return handle.read()[-2000:]
        except OSError:
            return ""
