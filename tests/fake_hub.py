"""A local stand-in for the Hugging Face hub, for tests: a small HTTP server answering the
requests huggingface_hub makes (model info, HEAD/GET resolve), with HF_ENDPOINT pointed at it."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    """Repos served over HTTP the way huggingface.co answers huggingface_hub."""

    def __init__(self):
        self.repos: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.truncate: set[tuple[str, str]] = set()
        self.stall: set[tuple[str, str]] = set()  # send half, then hang until released
        self.release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):
                hub.serve(self, body=False)

            def do_GET(self):
                hub.serve(self, body=True)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, repo_id, files, *, gated=False, claimed_size=None):
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        self.repos[repo_id] = dict(commit=commit, files=files, gated=gated, claimed=claimed_size)

    def serve(self, handler, *, body):
        path = handler.path.split("?")[0]
        self.requests.append((handler.command, path))
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        repo_id = (api or resolve).group(1) if (api or resolve) else None
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.error(handler, 404, "RepoNotFound")
        if repo["gated"]:
            return self.error(handler, 403, "GatedRepo")
        if api:
            siblings = [
                {"rfilename": name, "size": repo["claimed"] or len(data)}
                for name, data in repo["files"].items()
            ]
            payload = json.dumps({"id": repo_id, "sha": repo["commit"], "siblings": siblings})
            return self.send(handler, payload.encode(), {"Content-Type": "application/json"}, body)
        name = resolve.group(3)
        if name not in repo["files"]:
            return self.error(handler, 404, "EntryNotFound")
        data = repo["files"][name]
        headers = {
            "X-Repo-Commit": repo["commit"],
            "ETag": '"' + hashlib.sha256(data).hexdigest() + '"',
        }
        if body and (repo_id, name) in self.truncate | self.stall:  # the connection drops
            data, headers["Content-Length"] = data[: len(data) // 2], str(len(data))
        self.send(handler, data, headers, body)
        if body and (repo_id, name) in self.stall:
            handler.wfile.flush()
            self.requests.append(("STALLED", path))
            self.release.wait(60)

    @staticmethod
    def send(handler, data, headers, body):
        handler.send_response(200)
        headers.setdefault("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)
        handler.close_connection = True

    @staticmethod
    def error(handler, status, code):
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", code)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
