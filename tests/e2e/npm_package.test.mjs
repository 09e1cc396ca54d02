// The npm package as a user gets it: `npm pack` of pkg/, the tarball installed into a
// scratch project, its `exports` resolved by Node, and a page of that project importing the
// package (through an import map of those resolutions) that runs Mimi on WebGPU in the
// package's worker and the CPU codec through the package's wasm export, on the same frame.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";
import { ROOT, serve, launchChromium } from "./harness.mjs";

let dir, server, browser;

before(() => {
  assert.ok(existsSync(`${ROOT}/pkg/package.json`), "pkg/ is missing: run ./build.sh first");
  dir = mkdtempSync(join(tmpdir(), "inferencelayer-npm-"));
});

after(async () => {
  await browser?.close();
  server?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("npm pack, install the tarball, import the package in a page", async () => {
  const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const packed = JSON.parse(npm(["pack", "--json", "--pack-destination", dir], `${ROOT}/pkg`))[0];
  const files = packed.files.map((f) => f.path);
  for (const f of ["moshi.js", "moshi.d.ts", "moshi-worker.js", "moshi-worklet.js", "ring.js", "inferencelayer.js", "inferencelayer_bg.wasm", "inferencelayer.d.ts", "LICENSE-MIT", "LICENSE-APACHE"]) {
    assert.ok(files.includes(f), `the tarball lacks ${f}`);
  }
  const app = join(dir, "app");
  execFileSync("mkdir", ["-p", app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
  npm(["install", "--no-audit", "--no-fund", "--offline", join(dir, packed.filename)], app);

  // Node resolves every entry of `exports` to a file of the installed package.
  writeFileSync(join(app, "resolve.mjs"), `
    const names = ["inferencelayer", "inferencelayer/worker", "inferencelayer/worklet", "inferencelayer/wasm"];
    console.log(JSON.stringify(Object.fromEntries(names.map((n) => [n, import.meta.resolve(n)]))));`);
  const resolved = JSON.parse(execFileSync(process.execPath, ["resolve.mjs"], { cwd: app, encoding: "utf8" }));
  const imports = {};
  for (const [name, url] of Object.entries(resolved)) {
    const path = fileURLToPath(url);
    assert.ok(path.startsWith(join(app, "node_modules", "inferencelayer")) && existsSync(path), `${name} -> ${path}`);
    imports[name] = "./" + relative(app, path);
  }
  assert.match(imports["inferencelayer"], /moshi\.js$/);
  assert.match(imports["inferencelayer/worker"], /moshi-worker\.js$/);
  assert.match(imports["inferencelayer/worklet"], /moshi-worklet\.js$/);
  const types = JSON.parse(readFileSync(join(app, "node_modules/inferencelayer/package.json"), "utf8")).exports["."].types;
  assert.ok(existsSync(join(app, "node_modules/inferencelayer", types)), "types of the main module");

  cpSync(`${ROOT}/www/models/mimi.safetensors`, join(app, "mimi.safetensors"));
  cpSync(`${ROOT}/www/models/mimi.json`, join(app, "mimi.json"));
  writeFileSync(join(app, "index.html"), `<!doctype html><meta charset="utf-8">
<script type="importmap">${JSON.stringify({ imports })}</script>
<script type="module">
  import { MimiCodec, support } from "inferencelayer";
  import init, { mimiCpuRoundtrip } from "inferencelayer/wasm";
  window.result = (async () => {
    const s = support();
    if (!s.ok) return { error: s.problems.join(" ") };
    const config = await (await fetch("mimi.json")).text();
    const codec = await MimiCodec.create({ mimi: "mimi.safetensors", mimiConfig: config });
    const pcm = new Float32Array(1920).map((_, i) => 0.3 * Math.sin(i * 0.05) * Math.sin(i * 0.0031));
    const codes = await codec.encode(pcm);
    const out = await codec.decode(codes);
    // three frames encoded without awaiting each other run in order: the codes of the same
    // frames encoded one after the other from the same state
    const frames = [0.2, 0.5, 0.8].map((a) => pcm.map((v, i) => a * v + 0.05 * Math.sin(i * 0.3 * a)));
    await codec.reset();
    const together = await Promise.all(frames.map((f) => codec.encode(f)));
    await codec.reset();
    const inTurn = [];
    for (const f of frames) inTurn.push(await codec.encode(f));
    // a code past the codebook's size: the worker's refusal, named after the method
    const refused = await codec.decode(Uint32Array.from([1000000, 0, 0, 0, 0, 0, 0, 0])).then(() => "accepted", (e) => e.message);
    codec.dispose();
    await init();
    const bytes = new Uint8Array(await (await fetch("mimi.safetensors")).arrayBuffer());
    const cpu = mimiCpuRoundtrip(bytes, config, pcm);
    return { refused, together: together.map((c) => Array.from(c)), inTurn: inTurn.map((c) => Array.from(c)), codes: Array.from(codes), cpuCodes: Array.from(cpu.codes), out: Array.from(out), cpuOut: Array.from(cpu.pcm) };
  })().catch((e) => ({ error: String(e && e.message || e) }));
</script>`);

  let url;
  ({ server, url } = await serve(app));
  browser = await launchChromium();
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.log("page error:", e.message));
  await page.goto(url);
  await page.waitForFunction(() => window.result, null, { timeout: 300_000 });
  const result = await page.evaluate(() => window.result);
  assert.equal(result.error, undefined, result.error);
  assert.equal(result.codes.length, 8);
  assert.deepEqual(result.codes, result.cpuCodes, "the package's GPU codec and its CPU codec disagree");
  assert.match(result.refused, /^MimiCodec\.decode: .*1000000/, "a code past the codebook's size");
  assert.equal(result.together.length, 3);
  assert.deepEqual(result.together, result.inTurn, "encode calls made without awaiting each other gave other codes than in turn");
  let e = 0, p = 0;
  result.cpuOut.forEach((v, i) => { e += (result.out[i] - v) ** 2; p += v * v; });
  const snr = 10 * Math.log10(p / Math.max(e, 1e-30));
  console.log(`npm package: ${packed.filename} (${(packed.size / 1e6).toFixed(2)} MB, ${files.length} files); codes ${result.codes}; decode SNR vs CPU ${snr.toFixed(1)} dB`);
  assert.ok(snr >= 40, `decode SNR ${snr.toFixed(1)} dB`);
});
