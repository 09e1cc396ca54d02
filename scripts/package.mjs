#!/usr/bin/env node
// Completes the npm package that `wasm-pack build --target web` wrote: adds the JS API, the
// worker, the worklet and their types, and the `exports` map wasm-pack does not write.
//   node scripts/package.mjs pkg
import { promises as fs } from "node:fs";
import { join } from "node:path";

const pkg = process.argv[2] || "pkg";
const own = ["moshi.js", "moshi.d.ts", "moshi-worker.js", "moshi-worklet.js", "ring.js"];
for (const f of own) await fs.copyFile(join("js", f), join(pkg, f));
const meta = JSON.parse(await fs.readFile(join(pkg, "package.json"), "utf8"));
meta.type = "module";
meta.main = "moshi.js";
meta.module = "moshi.js";
meta.types = "moshi.d.ts";
meta.exports = {
  ".": { types: "./moshi.d.ts", default: "./moshi.js" },
  "./worker": "./moshi-worker.js",
  "./worklet": "./moshi-worklet.js",
  "./wasm": { types: "./inferencelayer.d.ts", default: "./inferencelayer.js" },
  "./inferencelayer_bg.wasm": "./inferencelayer_bg.wasm",
  "./package.json": "./package.json",
};
// (npm packs a LICENSE file of its own accord, but not LICENSE-MIT or LICENSE-APACHE)
const licenses = (await fs.readdir(pkg)).filter((f) => f.startsWith("LICENSE"));
meta.files = [...new Set([...(meta.files || []), ...own, ...licenses])];
meta.sideEffects = ["./moshi-worker.js", "./moshi-worklet.js"];
await fs.writeFile(join(pkg, "package.json"), JSON.stringify(meta, null, 2) + "\n");
console.log(`${pkg}/package.json: exports ${Object.keys(meta.exports).join(", ")}`);
