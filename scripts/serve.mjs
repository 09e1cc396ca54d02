#!/usr/bin/env node
// A static file server for the web app: every response carries the cross-origin isolation
// headers (COOP same-origin, COEP require-corp, CORP same-origin) that SharedArrayBuffer
// needs, the right MIME types for wasm and ES modules, and byte ranges (resumable weight
// downloads). No dependencies.
//   node scripts/serve.mjs [ROOT=www] [PORT=8080]   (PORT 0: any free port; prints the URL)
import { createServer } from "node:http";
import { createReadStream, promises as fs } from "node:fs";
import { extname, isAbsolute, join, normalize, relative, resolve } from "node:path";

const root = resolve(process.argv[2] || "www");
const portArg = process.argv[3] ?? "8080";
const port = /^(0|[1-9][0-9]{0,4})$/.test(portArg) ? Number(portArg) : NaN;
if (!(port >= 0 && port <= 65535)) {
  console.error(`serve: PORT must be a whole number from 0 to 65535 (0: any free port), got ${JSON.stringify(process.argv[3])}`);
  process.exit(1);
}
if (!(await fs.stat(root).catch(() => null))?.isDirectory()) {
  console.error(`serve: ${root} is not a directory: name the folder to serve (./build.sh builds www/)`);
  process.exit(1);
}
const types = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8", ".json": "application/json", ".wasm": "application/wasm", ".wav": "audio/wav",
  ".png": "image/png", ".svg": "image/svg+xml", ".ts": "text/plain; charset=utf-8", ".map": "application/json",
};

const server = createServer(async (req, res) => {
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cross-Origin-Embedder-Policy", "require-corp");
  res.setHeader("Cross-Origin-Resource-Policy", "same-origin");
  res.setHeader("Cache-Control", "no-cache");
  let path;
  try {
    path = decodeURIComponent(new URL(req.url, "http://x").pathname);
  } catch {
    return res.writeHead(400, { "Content-Type": "text/plain" }).end("bad URL\n");
  }
  let file = normalize(join(root, path));
  const rel = relative(root, file);
  if (rel.startsWith("..") || isAbsolute(rel)) return res.writeHead(403).end();
  let st;
  try {
    st = await fs.stat(file);
    if (st.isDirectory()) {
      file = join(file, "index.html");
      st = await fs.stat(file);
    }
  } catch {
    return res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
  }
  // a version of the file (its size and modification time), so that a page's stored copy of a
  // model notices the file changed
  const headers = {
    "Content-Type": types[extname(file)] || "application/octet-stream",
    "Accept-Ranges": "bytes",
    ETag: `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`,
    "Last-Modified": st.mtime.toUTCString(),
    // with a Last-Modified a browser may otherwise reuse a page file unasked for a while
    "Cache-Control": "no-cache",
  };
  const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || "");
  let start = 0, end = st.size - 1, status = 200;
  if (range) {
    start = range[1] ? Number(range[1]) : Math.max(0, st.size - Number(range[2]));
    end = range[1] && range[2] ? Math.min(Number(range[2]), st.size - 1) : st.size - 1;
    if (start > end || start >= st.size) {
      return res.writeHead(416, { "Content-Range": `bytes */${st.size}` }).end();
    }
    status = 206;
    headers["Content-Range"] = `bytes ${start}-${end}/${st.size}`;
  }
  headers["Content-Length"] = Math.max(0, end - start + 1);
  res.writeHead(status, headers);
  if (req.method === "HEAD" || st.size === 0) return res.end();
  createReadStream(file, { start, end }).on("error", () => res.destroy()).pipe(res);
});
server.on("error", (e) => {
  const hint = e.code === "EADDRINUSE" ? ` (port ${port} is in use: set PORT=... to another, or stop what holds it)` : "";
  console.error(`serve: ${e.message}${hint}`);
  process.exit(1);
});
server.listen(port, "127.0.0.1", () => {
  console.log(`serving ${root} at http://127.0.0.1:${server.address().port}/`);
});
