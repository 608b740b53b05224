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
