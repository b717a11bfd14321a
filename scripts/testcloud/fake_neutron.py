#!/usr/bin/env python3
"""A stand-in for the Neutron API, for the test cloud's compute services only.

Nova's compute and API services ask Neutron about ports even for servers booted with ``networks: none``
(listing the ports of an instance on delete and shelve-offload, the extension list). The test cloud has
no networking service; this answers those read calls with empty lists so servers without networks can
be created, shelved and deleted. It accepts no writes (404) and stores nothing.

    fake_neutron.py PORT
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

# Collections Nova reads; every one is empty here.
COLLECTIONS = ("ports", "networks", "subnets", "extensions", "security-groups", "floatingips", "trunks",
               "qos/policies", "segments")


class Handler(BaseHTTPRequestHandler):
    server_version = "ogc-fake-neutron/1"

    def log_message(self, fmt, *args):  # pylint: disable=arguments-differ
        sys.stderr.write(f"{self.log_date_time_string()} {fmt % args}\n")

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # pylint: disable=invalid-name
        path = urlparse(self.path).path.rstrip("/")
        if path in ("", "/"):
            self.answer(200, {"versions": [{"id": "v2.0", "status": "CURRENT",
                                            "links": [{"rel": "self", "href": "/v2.0/"}]}]})
            return
        if path.endswith(".json"):
            path = path[:-5]
        for name in COLLECTIONS:
            if path == "/v2.0/" + name:
                self.answer(200, {name.replace("-", "_").split("/")[-1]: []})
                return
        self.answer(404, {"NeutronError": {"type": "NotFound", "message": f"test cloud: no {path}",
                                           "detail": ""}})

    def do_POST(self):  # pylint: disable=invalid-name
        self.answer(404, {"NeutronError": {"type": "NotFound", "message": "test cloud: read-only stand-in",
                                           "detail": ""}})

    do_PUT = do_POST
    do_DELETE = do_POST


def main():
    port = int(sys.argv[1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
