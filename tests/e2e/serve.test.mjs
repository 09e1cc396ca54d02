// The demo's static server (scripts/serve.mjs) in Node, no browser: what it refuses at start,
// and the headers, byte ranges and refusals of what it serves.
//   node --test tests/e2e/serve.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { get } from "node:http";
import { ROOT, serve } from "./harness.mjs";

const start = (...args) => spawnSync(process.execPath, [`${ROOT}/scripts/serve.mjs`, ...args], { encoding: "utf8", timeout: 10_000 });

test("serve.mjs refuses a bad port and a folder that is not there, before it listens", () => {
  for (const port of ["abc", "70000", "-1", "08"]) {
    const r = start(`${ROOT}/www`, port);
    assert.equal(r.status, 1, `port ${port}`);
    assert.match(r.stderr, /PORT must be a whole number from 0 to 65535/);
  }
  for (const dir of [`${ROOT}/no-such-folder`, `${ROOT}/README.md`]) {
    const r = start(dir, "0");
    assert.equal(r.status, 1, dir);
    assert.match(r.stderr, /is not a directory: name the folder to serve/);
  }
});

test("serve.mjs serves www/ cross-origin isolated, with byte ranges, and nothing outside it", async () => {
  const { server, url } = await serve(`${ROOT}/www`);
  try {
    const index = readFileSync(`${ROOT}/www/index.html`);
    let r = await fetch(url);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("cross-origin-opener-policy"), "same-origin");
    assert.equal(r.headers.get("cross-origin-embedder-policy"), "require-corp");
    assert.equal(r.headers.get("cross-origin-resource-policy"), "same-origin");
    assert.match(r.headers.get("content-type"), /^text\/html/);
    assert.deepEqual(Buffer.from(await r.arrayBuffer()), index);
    r = await fetch(`${url}index.html`, { headers: { Range: "bytes=5-14" } });
    assert.equal(r.status, 206);
    assert.equal(r.headers.get("content-range"), `bytes 5-14/${index.length}`);
    assert.deepEqual(Buffer.from(await r.arrayBuffer()), index.subarray(5, 15));
    r = await fetch(`${url}index.html`, { headers: { Range: `bytes=${index.length}-` } });
    assert.equal(r.status, 416);
    r = await fetch(`${url}no-such-file.bin`);
    assert.equal(r.status, 404);
    // paths that climb out of the folder, sent as they are (fetch would resolve the dots):
    // plain dots resolve inside it, an encoded slash is refused
    const u = new URL(url);
    const status = (path) =>
      new Promise((ok, fail) => get({ host: u.hostname, port: u.port, path }, (res) => ok(res.resume().statusCode)).on("error", fail));
    assert.equal(await status("/../README.md"), 404, "/../README.md is www/README.md");
    assert.equal(await status("/..%2fREADME.md"), 403, "an encoded slash out of the folder");
    assert.equal(await status("/%2e%2e%2f%2e%2e%2fCargo.toml"), 403, "encoded dots and slashes out of the folder");
  } finally {
    server.kill();
  }
});
