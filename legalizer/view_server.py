"""The server behind ``legalize view``: Model Explorer's page, the run's graphs and its
overlays, and nothing else.

Model Explorer's own server reads any file by path (``/api/v1/read_text_file``), takes
uploads and runs its adapters on them (the ``.pt2`` one unpickles): anything that can
reach its port could use them. This one serves a fixed set of answers made before it
starts:

- the page's files (Model Explorer's ``web_app`` folder, listed once: a request names
  one of them or gets 404);
- each model's graphs, converted beforehand (``/api/v1/load_graphs_json?graph_index=N``)
  and each overlay (``/api/v1/load_node_data?node_data_index=N``);
- the adapter list the page asks for, reduced to its JSON loader.

Every request must carry the run's token (``?token=``, which the printed address has;
the answer sets it as a ``SameSite=Strict`` cookie for the page's own requests) and a
``Host`` header naming the address the server bound, or it gets 403: another local user's
process lacks the token, and a page that reaches the port by DNS rebinding names its own
host.
"""

from __future__ import annotations

import hmac
import json
import mimetypes
import os
import secrets
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional
from urllib.parse import parse_qs, urlsplit

# What the page asks of the server besides the graphs and the node data; answered with
# fixed values (no version check over the network, no adapters but the JSON loader).
JSON_LOADER = {"fileExts": ["json"], "type": "adapter", "id": "builtin_json", "name": "JSON adapter",
               "description": "Convert graphs json data file or tfjs model."}
NO_NEW_VERSION = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def bundle(folder: Path) -> Dict[str, Path]:
    """The page's files by the path the page asks them under (``/main-XYZ.js``): listed
    once, so that a request can only name one of them."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            p = Path(root) / name
            if p.is_file() and not p.is_symlink():
                files["/" + p.relative_to(folder).as_posix()] = p
    return files


class ViewServer(ThreadingHTTPServer):
    """Serves ``files``, ``graphs`` (one JSON text per model) and ``node_data`` (one JSON
    text per overlay) to requests that carry ``token`` and name ``host_header``."""

    daemon_threads = True

    def __init__(self, address, files: Dict[str, Path], graphs: List[str], node_data: List[str],
                 host_header: str, token: Optional[str] = None, family: int = socket.AF_INET):
        self.address_family = family
        self.files, self.graphs, self.node_data = files, graphs, node_data
        self.host_header = host_header
        self.token = token or secrets.token_urlsafe(32)
        self.cookie = f"legalize_view_{address[1]}"
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # the terminal shows the address and ^C, not each request

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8", cookie: bool = False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")  # the token stays out of other sites' logs
        if cookie:
            self.send_header("Set-Cookie", f"{self.server.cookie}={self.server.token}; Path=/; HttpOnly;"
                                           " SameSite=Strict")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, cookie: bool = False):
        self._send(200, json.dumps(obj).encode(), "application/json", cookie)

    def _allowed(self, query: dict) -> Optional[bool]:
        """None when refused; else whether the token came in the query (then the answer
        sets the cookie)."""
        if self.headers.get("Host", "") != self.server.host_header:
            return None
        token = self.server.token.encode()
        given = query.get("token", [""])[0]
        if given and hmac.compare_digest(given.encode(), token):
            return True
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.server.cookie and hmac.compare_digest(value.encode(), token):
                return False
        return None

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        allowed = self._allowed(query)
        if allowed is None:
            return self._send(403, b"forbidden\n")
        path = url.path
        if path == "/":
            path = "/index.html"
        if path == "/api/v1/load_graphs_json":
            text = _pick(self.server.graphs, query.get("graph_index"))
            return self._send(200, text.encode(), "application/json") if text is not None else \
                self._send(404, b"no such graphs\n")
        if path == "/api/v1/load_node_data":
            text = _pick(self.server.node_data, query.get("node_data_index"))
            return self._json({"content": text}) if text is not None else self._send(404, b"no such node data\n")
        if path == "/api/v1/get_extensions":
            return self._json([JSON_LOADER])
        if path == "/api/v1/check_new_version":
            return self._json(NO_NEW_VERSION)
        if path == "/check_health":
            return self._send(200, b"model_explorer_ok", cookie=allowed)
        f = self.server.files.get(path)
        if f is None:
            return self._send(404, b"not found\n")
        ctype = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
            ctype += "; charset=utf-8"
        self._send(200, f.read_bytes(), ctype, cookie=allowed)

    do_HEAD = do_GET

    def _refuse(self):
        # Uploads, commands, config updates: nothing is taken. A body is not read.
        self.close_connection = True
        if self._allowed(parse_qs(urlsplit(self.path).query)) is None:
            return self._send(403, b"forbidden\n")
        self._send(405, b"this page is read only\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse


def _pick(items: List[str], index) -> Optional[str]:
    try:
        i = int(index[0])
    except (TypeError, ValueError, IndexError):
        return None
    return items[i] if 0 <= i < len(items) else None
