// A link to an appendix, or to a place inside one, opens the appendix's folded content (Chromium opens a <details>
// for a target inside it, not for its section's heading).
function openAppendix() {
  const target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  const section = target && target.closest("section.appendix");
  const body = section && section.querySelector(":scope > details.appendix-body");
  if (body && !body.open) {
    body.open = true;
    target.scrollIntoView();
  }
}
window.addEventListener("hashchange", openAppendix);
document.addEventListener("DOMContentLoaded", openAppendix);

// An explorer saved with its standalone page (series.py's explorer_output): the page runs in an <iframe srcdoc>,
// with its own styles and script, in place of the static picture, which stays for readers whose scripts are off.
// The frame is made as tall as its page when it loads, when the reader changes its view (a picture of another
// height), when a <details> around it opens and when the window's width changes. These are measured from here, not
// observed inside the frame: a browser does not update the rendering of a frame out of view, or folded, until shown.
function fitExplorer(frame) {
  const doc = frame.contentDocument, body = doc && doc.body;
  if (!body || !frame.getClientRects().length) return; // not loaded yet, or folded: measured when it opens
  const margin = parseFloat(frame.contentWindow.getComputedStyle(body).marginBottom) || 0;
  const bar = frame.contentWindow.innerHeight - doc.documentElement.clientHeight; // a horizontal scroll bar
  frame.style.height = `${Math.ceil(body.getBoundingClientRect().bottom + margin + bar)}px`;
}
function fitExplorers() {
  document.querySelectorAll("iframe.explorer-frame").forEach(fitExplorer);
}
function liveExplorers() {
  for (const live of document.querySelectorAll(".explorer-live[data-page]")) {
    const frame = document.createElement("iframe");
    frame.className = "explorer-frame";
    frame.title = document.documentElement.lang.startsWith("zh") ? "注意力探索器" : "attention explorer";
    frame.setAttribute("sandbox", "allow-scripts allow-same-origin"); // same origin: this page measures its height
    frame.addEventListener("load", () => {
      fitExplorer(frame);
      frame.contentDocument.addEventListener("change", () => fitExplorer(frame)); // after the page has redrawn
    });
    frame.srcdoc = live.dataset.page;
    live.removeAttribute("data-page"); // the page lives in the frame now, not twice in this document
    live.append(frame);
    live.hidden = false;
    live.closest(".explorer").classList.add("explorer-is-live");
  }
}
document.addEventListener("DOMContentLoaded", liveExplorers);
document.addEventListener("toggle", fitExplorers, true); // "toggle" does not bubble: caught on its way down
window.addEventListener("resize", fitExplorers);
