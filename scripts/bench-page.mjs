// The benchmark page (www/bench.html) in headless Chromium through Playwright, as the
// end-to-end tests drive the demo: serves www/, opens the page with QUERY, waits for
// `window.benchDone`, prints the per-stage table and writes `window.benchResult` to OUT.
//   node scripts/bench-page.mjs [QUERY=frames=20&warmup=2] [OUT=out/bench-page.json]
// Needs ./build.sh's www/pkg and www/models, and tests/e2e's npm packages (Playwright).
// Exits 1 when the page reports an error.
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { serve, launchChromium } from "../tests/e2e/harness.mjs";

const query = process.argv[2] || "frames=20&warmup=2";
const out = process.argv[3] || "out/bench-page.json";
const timeout = Number(process.env.BENCH_TIMEOUT_MS || 3_600_000);
const { server, url } = await serve("www");
const browser = await launchChromium();
let failed = true;
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  page.on("console", (m) => m.type() === "error" && console.error("console:", m.text()));
  await page.goto(`${url}bench.html?${query}`);
  await page.waitForFunction(() => window.benchDone, null, { timeout, polling: 500 });
  const r = await page.evaluate(() => window.benchResult);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(r, null, 2));
  console.log(`adapter: ${JSON.stringify(r.adapter)} (headless Chromium; on SwiftShader a CPU emulating a GPU: for regressions only)`);
  console.log(await page.evaluate(() => [...document.querySelectorAll("#results tr")].map((tr) => [...tr.cells].map((c, i) => (i ? c.textContent.padStart(10) : c.textContent.padEnd(34))).join("")).join("\n")));
  console.log(await page.evaluate(() => document.getElementById("summary").innerText));
  console.log(`report: ${out}`);
  if (r.error) console.error(`the benchmark failed: ${r.error}`);
  failed = Boolean(r.error);
} finally {
  await browser.close();
  server.kill();
}
process.exit(failed ? 1 : 0);
