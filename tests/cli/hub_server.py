#!/usr/bin/env python3
"""tests/cli/hub_server.py: a tiny stand-in for the Hugging Face Hub, for the download tests.

Serves repositories from ROOT/<owner>/<name>/ in the Hub's URL layout, on loopback:
  GET /api/models/<owner>/<name>/revision/<rev>[?blobs=true]  -> {"id", "sha", "siblings": [{"rfilename", "size"}]}
  GET /<owner>/<name>/resolve/<rev>/<file>                     -> 302 to /blobs/... for *.safetensors, else the file
  GET /blobs/<owner>/<name>/<file>                             -> the file (Range, If-Range, ETag)
Options (state in files under ROOT/_control/, so a test can change them between runs):
  token          when present, every request needs "Authorization: Bearer <content>" (else 401)
  interrupt      "<file> <n>": the next full GET of <file> sends its headers and n bytes, then closes
  corrupt        "<file>": the listing reports that file 100 bytes larger than it is
  flip           "<file>": that file is served with one byte changed (same size; *.safetensors
                 are listed with their LFS sha256, so the client can tell)
  norange        when present, Range headers are ignored (200 with the whole file)
  inject         a file name added to the listing (that the server does not have)
  log            every request line is appended here
Prints the port on stdout when listening. Standard library only.
"""
import hashlib, json, os, sys, urllib.parse
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

ROOT = sys.argv[1]
CTL = os.path.join(ROOT, "_control")


def ctl(name):
    p = os.path.join(CTL, name)
    if os.path.exists(p):
        with open(p) as f:
            return f.read().strip()
    return None


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        os.makedirs(CTL, exist_ok=True)
        with open(os.path.join(CTL, "log"), "a") as f:
            f.write("%s %s range=%s\n" % (self.command, self.path, self.headers.get("Range")))
        tok = ctl("token")
        if tok is not None and self.headers.get("Authorization") != "Bearer " + tok:
            return self.send_json(401, {"error": "Invalid credentials in Authorization header"})
        url = urllib.parse.urlparse(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if len(parts) >= 6 and parts[0] == "api" and parts[1] == "models" and parts[4] == "revision":
            repo = os.path.join(ROOT, parts[2], parts[3])
            if not os.path.isdir(repo) or parts[2].startswith("_"):
                return self.send_json(404, {"error": "Repository not found"})
            corrupt = ctl("corrupt")
            sib = []
            for dp, dn, fn in os.walk(repo):
                for n in sorted(fn):
                    rel = os.path.relpath(os.path.join(dp, n), repo)
                    size = os.path.getsize(os.path.join(dp, n))
                    if rel == corrupt:
                        size += 100
                    e = {"rfilename": rel, "size": size}
                    if rel.endswith(".safetensors"):
                        with open(os.path.join(dp, n), "rb") as f:
                            e["lfs"] = {"sha256": hashlib.sha256(f.read()).hexdigest(), "size": size}
                    sib.append(e)
            inject = ctl("inject")
            if inject:
                sib.append({"rfilename": inject, "size": 10})
            return self.send_json(200, {"id": parts[2] + "/" + parts[3], "sha": "0123abcd", "siblings": sib})
        if len(parts) >= 5 and parts[2] == "resolve":
            owner, name, rev, rel = parts[0], parts[1], parts[3], "/".join(parts[4:])
            path = os.path.join(ROOT, owner, name, rel)
            if not os.path.isfile(path):
                return self.send_json(404, {"error": "Entry not found"})
            if rel.endswith(".safetensors"):
                self.send_response(302)
                self.send_header("Location", "/blobs/%s/%s/%s" % (owner, name, urllib.parse.quote(rel)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            return self.send_file(path, rel)
        if len(parts) >= 4 and parts[0] == "blobs":
            rel = "/".join(parts[3:])
            path = os.path.join(ROOT, parts[1], parts[2], rel)
            if not os.path.isfile(path):
                return self.send_json(404, {"error": "Entry not found"})
            return self.send_file(path, rel)
        return self.send_json(404, {"error": "not found"})

    def send_file(self, path, rel):
        with open(path, "rb") as f:
            data = f.read()
        if ctl("flip") == rel:
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        etag = '"%s"' % hashlib.sha1(data).hexdigest()
        start = 0
        rng = self.headers.get("Range")
        ifr = self.headers.get("If-Range")
        if rng and rng.startswith("bytes=") and (ifr is None or ifr == etag) and ctl("norange") is None:
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        interrupt = ctl("interrupt")
        if interrupt and start == 0:
            f, n = interrupt.rsplit(" ", 1)
            if f == rel:
                os.remove(os.path.join(CTL, "interrupt"))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body[: int(n)])
                self.wfile.flush()
                self.close_connection = True
                return
        self.end_headers()
        self.wfile.write(body)


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
