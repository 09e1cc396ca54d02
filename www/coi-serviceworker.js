// Cross-origin isolation for static hosts that cannot set headers: this service worker adds
// COOP/COEP/CORP to every same-origin response, so that SharedArrayBuffer (the audio rings)
// is available. As a page script it registers itself and reloads once when the page is not
// isolated yet; where the server already sends the headers it does nothing.
if (typeof window === "undefined") {
  self.addEventListener("install", () => self.skipWaiting());
  self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));
  self.addEventListener("fetch", (e) => {
    const req = e.request;
    if (req.cache === "only-if-cached" && req.mode !== "same-origin") return;
    e.respondWith(
      fetch(req).then((res) => {
        if (res.status === 0 || new URL(req.url).origin !== self.location.origin) return res;
        const h = new Headers(res.headers);
        h.set("Cross-Origin-Opener-Policy", "same-origin");
        h.set("Cross-Origin-Embedder-Policy", "require-corp");
        h.set("Cross-Origin-Resource-Policy", "same-origin");
        return new Response(res.body, { status: res.status, statusText: res.statusText, headers: h });
      }),
    );
  });
} else if (!window.crossOriginIsolated && window.isSecureContext && navigator.serviceWorker) {
  navigator.serviceWorker.register(document.currentScript.src).then((r) => {
    if (sessionStorage.getItem("coi-reloaded")) return;
    sessionStorage.setItem("coi-reloaded", "1");
    if (r.active && !navigator.serviceWorker.controller) location.reload();
    else r.addEventListener("updatefound", () => r.installing.addEventListener("statechange", (e) => e.target.state === "activated" && location.reload()));
  }).catch((e) => console.warn("cross-origin isolation through a service worker is not available here:", e.message));
}
