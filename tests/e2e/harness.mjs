// What the end-to-end tests share: the demo server on a free port and headless Chromium
// with WebGPU (Debian's chromium, `CHROMIUM=` to change it). Not a test file itself.
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { chromium } from "playwright-core";

export const ROOT = resolve(import.meta.dirname, "../..");

/** Serve `dir` with `scripts/serve.mjs` (COOP/COEP headers) on a free port: `{ server, url }`. */
export async function serve(dir) {
  const server = spawn(process.execPath, [`${ROOT}/scripts/serve.mjs`, dir, "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((ok, fail) => {
    server.stdout.on("data", (d) => {
      const m = /(http:\/\/\S+)/.exec(String(d));
      if (m) ok(m[1]);
    });
    server.on("exit", (c) => fail(new Error(`server exited ${c}`)));
  });
  return { server, url };
}

/**
 * Headless Chromium with WebGPU; with `speech` (a WAV path), a fake microphone playing it once;
 * `args`: more of Chromium's switches.
 */
export function launchChromium({ speech, args = [] } = {}) {
  const mic = speech
    ? ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${speech}%noloop`, "--autoplay-policy=no-user-gesture-required"]
    : [];
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--enable-unsafe-webgpu", "--no-sandbox", ...mic, "--disable-background-networking", "--disable-component-update", "--no-first-run", ...args],
  });
}

/**
 * Watch `page`'s requests: the returned array collects `"STATUS URL"` for every response with
 * an HTTP error status (the browser's own `/favicon.ico` probe aside) and `"ERROR URL"` for
 * every request that got no response, so that a test can require that the page asked for
 * nothing that is missing.
 */
export function failedRequests(page) {
  const failed = [];
  page.on("response", (r) => r.status() >= 400 && new URL(r.url()).pathname !== "/favicon.ico" && failed.push(`${r.status()} ${r.url()}`));
  page.on("requestfailed", (r) => failed.push(`${r.failure()?.errorText ?? "failed"} ${r.url()}`));
  return failed;
}
