// Orchestra console: live regions and actions without a reload. The pages work
// without this file (forms post and redirect; reload to see changes). With it,
// the server's events replace each region that changed, and a form is posted
// with fetch: the live updates show its effect, #notice says how it went.
(() => {
  "use strict";
  const url = document.body.dataset.live;
  if (!url || !window.EventSource) return;
  const source = new EventSource(url);
  const dot = document.querySelector(".live-dot");
  const state = (offline, title) => {
    document.body.classList.toggle("offline", offline);
    if (dot) dot.title = title;
  };
  source.addEventListener("update", (event) => {
    const parts = JSON.parse(event.data);
    for (const [id, html] of Object.entries(parts)) {
      const region = document.getElementById(id);
      if (region) region.innerHTML = html;
    }
    state(false, "updates as the runs change");
  });
  source.addEventListener("trouble", (event) => state(true, JSON.parse(event.data)));
  source.addEventListener("open", () => state(false, "updates as the runs change"));
  source.addEventListener("error", () => state(true, "reconnecting to the console…"));

  const notice = document.getElementById("notice");
  const say = (text, ok) => {
    if (!notice) return;
    notice.textContent = text;
    notice.className = ok ? "banner ok" : "banner error";
  };
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!notice || !window.fetch || !form.matches("form.action")) return;
    event.preventDefault();
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    for (const old of document.querySelectorAll(".banner")) if (old !== notice) old.remove();
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        headers: { "x-orchestra-fetch": "1" },
      });
      let said = `${response.status} ${response.statusText}`;
      try { said = (await response.json()).said; } catch (_) { /* not JSON: the status */ }
      say(said, response.ok);
    } catch (error) {
      say(`the console did not answer: ${error}`, false);
    }
    if (button) button.disabled = false;
  });
})();
