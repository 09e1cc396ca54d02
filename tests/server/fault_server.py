#!/usr/bin/env python3
"""A local HTTP server for the browser loader tests: checkpoint files with Range support,
and faults injected by URL. Python standard library only.

    python3 tests/server/fault_server.py [--port 8719] [--host 127.0.0.1]

Files (generated at start from fixed seeds, never read from disk):
  small.safetensors   bf16, 4 tensors, about 3.1 MB (the browser tests)
  moshi-7b.safetensors?layers=N
                      bf16 at Moshi 7B's geometry (Kyutai's tensor names and shapes),
                      about 15.4 GB with the default 32 layers, streamed from a repeated
                      1 MiB block of seeded values, never held (the browser load benchmark)

URLs: /<token>/<fault>/<file>, where <token> is any name a test picks (faults that happen
once happen once per token) and <fault> is one of
  ok              no fault
  reset-N         the first request's connection is reset (TCP RST) once the body reaches
                  file byte N
  cut-N           the first request declares the whole length but its body stops at file
                  byte N and the connection closes (a wrong Content-Length)
  status-S        every request is answered with HTTP status S
  status-S-once   the first request is answered with S, the rest normally
  range200-N      as reset-N, and every Range request is answered with 200 and the whole file
  slow-MS         every 64 KiB of body waits MS milliseconds
/log/<token> gives the requests made under a token as JSON: [{"range": ..., "status": ...}].
/ping answers "ok".

Every answer carries CORS headers (Access-Control-Allow-Origin: *, exposed Content-Range,
Content-Length, ETag) and Cross-Origin-Resource-Policy: cross-origin, as a page served with
COEP require-corp needs; OPTIONS preflights are answered.
"""

import argparse
import array
import json
import random
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Range",
    "Access-Control-Expose-Headers": "Content-Range, Content-Length, ETag, Accept-Ranges",
    "Access-Control-Max-Age": "600",
    "Cross-Origin-Resource-Policy": "cross-origin",
}

MIB = 1 << 20


def bf16_block(rng, n):
    """n seeded bf16 values, finite, magnitudes 2^-8 .. 1, as little-endian bytes."""
    raw = array.array("H", rng.randbytes(2 * n))
    # keep sign and 7 mantissa bits; exponent 119..126 (a value in [2^-8, 1))
    out = array.array("H", ((x & 0x807F) | ((119 + ((x >> 7) & 7)) << 7) for x in raw))
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def st_header(specs):
    """A safetensors header (length + JSON padded to 8 bytes) for bf16 tensors in order."""
    meta, off = {}, 0
    for name, shape in specs:
        n = 1
        for d in shape:
            n *= d
        meta[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    js = json.dumps(meta, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js, off


SMALL_SPECS = [("a.weight", [256, 1024]), ("b.weight", [1024, 1024]), ("c.alpha", [1024]), ("d.weight", [512, 512])]


def small_file():
    rng = random.Random(20261201)
    head, n = st_header(SMALL_SPECS)
    return head + bf16_block(rng, n // 2)


def moshi_specs(layers):
    """Moshi 7B (moshiko), Kyutai's released names and shapes, as examples/load_bench.rs."""
    d, h, dd, dh, card, text = 4096, 11264, 1024, 2816, 2048, 32000
    v = [("text_emb.weight", [text + 1, d])]
    v += [(f"emb.{k}.weight", [card + 1, d]) for k in range(16)]
    for i in range(layers):
        p = f"transformer.layers.{i}"
        v += [
            (f"{p}.norm1.alpha", [1, 1, d]),
            (f"{p}.self_attn.in_proj_weight", [3 * d, d]),
            (f"{p}.self_attn.out_proj.weight", [d, d]),
            (f"{p}.norm2.alpha", [1, 1, d]),
            (f"{p}.gating.linear_in.weight", [2 * h, d]),
            (f"{p}.gating.linear_out.weight", [d, h]),
        ]
    v.append(("out_norm.alpha", [1, 1, d]))
    v.append(("text_linear.weight", [text, d]))
    v += [(f"depformer_in.{k}.weight", [dd, d]) for k in range(8)]
    v += [(f"depformer_emb.{k}.weight", [card + 1, dd]) for k in range(7)]
    v.append(("depformer_text_emb.weight", [text + 1, dd]))
    for j in range(6):
        p = f"depformer.layers.{j}"
        v += [
            (f"{p}.norm1.alpha", [1, 1, dd]),
            (f"{p}.self_attn.in_proj_weight", [8 * 3 * dd, dd]),
            (f"{p}.self_attn.out_proj.weight", [8 * dd, dd]),
            (f"{p}.norm2.alpha", [1, 1, dd]),
        ]
        for k in range(8):
            v += [(f"{p}.gating.{k}.linear_in.weight", [2 * dh, dd]), (f"{p}.gating.{k}.linear_out.weight", [dd, dh])]
    v += [(f"linears.{k}.weight", [card, dd]) for k in range(8)]
    return v


class Virtual:
    """A file made of a header and a repeated block: bytes [a, b) on demand."""

    def __init__(self, head, data_len, block):
        self.head, self.data_len, self.block = head, data_len, block
        self.size = len(head) + data_len

    def chunks(self, a, b, step=MIB):
        h = len(self.head)
        while a < b:
            if a < h:
                e = min(b, h)
                yield self.head[a:e]
            else:
                off = (a - h) % len(self.block)
                e = min(b, a + min(step, len(self.block) - off))
                yield self.block[off : off + (e - a)]
            a = e


class Files:
    def __init__(self):
        self.small = small_file()
        self.block = bf16_block(random.Random(7), MIB // 2)
        self.virtual = {}
        self.lock = threading.Lock()

    def moshi(self, layers):
        with self.lock:
            if layers not in self.virtual:
                head, n = st_header(moshi_specs(layers))
                self.virtual[layers] = Virtual(head, n, self.block)
            return self.virtual[layers]


FILES = None
LOG = {}
LOG_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send(self, status, body=b"", headers=None, ctype="text/plain"):
        self.send_response(status)
        for k, v in CORS.items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    def do_OPTIONS(self):
        self.send(204)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path, _, query = self.path.partition("?")
        parts = [p for p in path.split("/") if p]
        if parts == ["ping"]:
            return self.send(200, b"ok")
        if len(parts) == 2 and parts[0] == "log":
            with LOG_LOCK:
                entries = list(LOG.get(parts[1], []))
            return self.send(200, json.dumps(entries).encode(), ctype="application/json")
        if len(parts) != 3:
            return self.send(404, b"no such path")
        token, fault, name = parts
        if name == "small.safetensors":
            data = FILES.small
            size = len(data)
            chunks = lambda a, b: (data[i : min(b, i + 65536)] for i in range(a, b, 65536))
            etag = '"small-20261201"'
        elif name == "moshi-7b.safetensors":
            q = dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)
            layers = int(q.get("layers", "32"))
            v = FILES.moshi(layers)
            size = v.size
            chunks = v.chunks
            etag = f'"moshi-7b-{layers}"'
        else:
            return self.send(404, b"no such file")

        rng = self.headers.get("Range")
        with LOG_LOCK:
            seen = LOG.setdefault(token, [])
            first = len(seen) == 0
            entry = {"range": rng, "status": None}
            seen.append(entry)

        def status_is(s):
            entry["status"] = s
            return s

        kind, _, arg = fault.partition("-")
        if kind == "status":
            code, _, once = arg.partition("-")
            if once != "once" or first:
                return self.send(status_is(int(code)), b"injected failure")
        a, b = 0, size
        status = 200
        if rng and not (kind == "range200"):
            try:
                unit, spec = rng.split("=", 1)
                lo, hi = spec.split("-", 1)
                a = int(lo)
                b = min(size, int(hi) + 1) if hi else size
                if unit.strip() != "bytes" or a >= size or a >= b:
                    raise ValueError
            except ValueError:
                return self.send(status_is(416), b"bad range", {"Content-Range": f"bytes */{size}"})
            status = 206
        status_is(status)
        stop = None
        if kind in ("reset", "cut", "range200") and first:
            stop = int(arg)
        delay = int(arg) / 1000 if kind == "slow" else 0

        self.send_response(status)
        for k, v in CORS.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(b - a))
        self.send_header("Connection", "close")
        if status == 206:
            self.send_header("Content-Range", f"bytes {a}-{b - 1}/{size}")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        try:
            at = a
            for c in chunks(a, b):
                if stop is not None and at + len(c) > stop:
                    self.wfile.write(c[: stop - at])
                    self.wfile.flush()
                    # let the client take the bytes before the connection goes
                    time.sleep(0.3)
                    if kind in ("reset", "range200"):
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                self.wfile.write(c)
                at += len(c)
                if delay:
                    time.sleep(delay)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


def main():
    global FILES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8719)
    args = ap.parse_args()
    FILES = Files()
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    print(f"fault server on http://{args.host}:{args.port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
