// The admin page's script: no inline script or handler anywhere, so the page's
// Content-Security-Policy allows scripts from this file only.
"use strict";

// Every few seconds, fetch this page again and swap each `data-live` element's content with the
// same element's in the fresh page (by id), keeping the boxes the user ticked; a region the user
// is typing in is left alone. What was fetched last is what a region is compared with (not the
// live DOM, which a zoomed drawing changes), so an unchanged region is never swapped. A sign-in
// redirect or an error leaves the page as it is; a hidden tab does not poll. Pages without live
// regions do not poll.
document.addEventListener("DOMContentLoaded", () => {
  if (!document.querySelector("[data-live]")) return;
  const fetched = new Map();
  for (const e of document.querySelectorAll("[data-live]")) fetched.set(e.id, e.innerHTML);
  const tick = async () => {
    if (document.hidden) return;
    try {
      const r = await fetch(location.href, { credentials: "same-origin" });
      if (!r.ok || r.redirected) return;
      const d = new DOMParser().parseFromString(await r.text(), "text/html");
      for (const e of document.querySelectorAll("[data-live]")) {
        const n = d.getElementById(e.id);
        const a = document.activeElement;
        if (!n || n.innerHTML === fetched.get(e.id)) continue;
        if (a && e.contains(a) && a.tagName === "INPUT" && a.type !== "checkbox") continue;
        const keep = new Set([...e.querySelectorAll("input[type=checkbox]:checked")].map((b) => b.id || b.value));
        const f = a && e.contains(a) ? a.id || a.value : null;
        e.innerHTML = n.innerHTML;
        fetched.set(e.id, n.innerHTML);
        regraph(e);
        for (const b of e.querySelectorAll("input[type=checkbox]")) {
          if (keep.has(b.id || b.value)) b.checked = true;
          if (f && (b.id || b.value) === f) b.focus();
        }
      }
    } catch (_) {}
  };
  setInterval(tick, 3000);
});

// "all" ticks or clears every row's box.
document.addEventListener("click", (e) => {
  const all = e.target.closest && e.target.closest("input#all");
  if (!all) return;
  for (const b of document.querySelectorAll("input[name=id]")) b.checked = all.checked;
});

// Forms that act ask first: a list's form names its verb (the button pressed) and how many rows
// are chosen; a form with data-confirm asks its own question.
document.addEventListener("submit", (e) => {
  const f = e.target;
  if (f.dataset.confirm !== undefined) {
    if (!confirm(f.dataset.confirm)) e.preventDefault();
    return;
  }
  if (f.dataset.chosen !== undefined) {
    const n = f.querySelectorAll("input[name=id]:checked").length;
    const verb = (e.submitter && e.submitter.dataset.verb) || "Act on";
    if (!(n > 0 && confirm(verb + " " + n + " steps?"))) e.preventDefault();
  }
});

// Graphs pan and zoom: a drawing fits the page's width until zoomed with its buttons (or Ctrl
// and the wheel); dragging or scrolling pans. Each drawing's zoom and place are kept when a
// live region is swapped.
const views = new Map();
function scaleOf(svg) {
  return svg.getBoundingClientRect().width / +svg.getAttribute("width");
}
function setZoom(frame, z) {
  const svg = frame.querySelector("svg.graph");
  if (!svg) return;
  const v = views.get(frame.dataset.graph) || {};
  v.z = z;
  views.set(frame.dataset.graph, v);
  if (z === undefined) {
    svg.classList.remove("zoomed");
    svg.style.width = svg.style.height = "";
  } else {
    svg.classList.add("zoomed");
    svg.style.width = +svg.getAttribute("width") * z + "px";
    svg.style.height = +svg.getAttribute("height") * z + "px";
  }
}
function regraph(root) {
  for (const frame of root.querySelectorAll(".graph-frame")) {
    const v = views.get(frame.dataset.graph);
    if (!v) continue;
    setZoom(frame, v.z);
    const view = frame.querySelector(".graph-view");
    view.scrollLeft = v.left || 0;
    view.scrollTop = v.top || 0;
  }
}
function zoomBy(frame, f) {
  const svg = frame.querySelector("svg.graph");
  if (svg) setZoom(frame, Math.min(4, Math.max(0.2, scaleOf(svg) * f)));
}
document.addEventListener("click", (e) => {
  const b = e.target.closest && e.target.closest("button[data-zoom]");
  if (!b) return;
  const frame = b.closest(".graph-frame");
  if (b.dataset.zoom === "fit") setZoom(frame, undefined);
  else zoomBy(frame, b.dataset.zoom === "in" ? 1.25 : 0.8);
});
document.addEventListener("wheel", (e) => {
  const view = e.target.closest && e.target.closest(".graph-view");
  if (!view || !e.ctrlKey) return;
  e.preventDefault();
  zoomBy(view.closest(".graph-frame"), e.deltaY < 0 ? 1.1 : 0.9);
}, { passive: false });
let pan = null;
function endPan() {
  if (!pan) return;
  pan.view.classList.remove("panning");
  pan = null;
}
document.addEventListener("pointerdown", (e) => {
  const view = e.target.closest && e.target.closest(".graph-view");
  if (!view || e.button !== 0) return;
  // A press on the view's own scrollbars scrolls, as ever.
  const box = view.getBoundingClientRect();
  if (e.clientX - box.left >= view.clientWidth || e.clientY - box.top >= view.clientHeight) return;
  pan = { view, x: e.clientX, y: e.clientY, left: view.scrollLeft, top: view.scrollTop };
  view.classList.add("panning");
  view.setPointerCapture(e.pointerId);
});
document.addEventListener("pointermove", (e) => {
  if (!pan) return;
  if (!(e.buttons & 1)) return endPan();
  pan.view.scrollLeft = pan.left - (e.clientX - pan.x);
  pan.view.scrollTop = pan.top - (e.clientY - pan.y);
});
document.addEventListener("pointerup", endPan);
document.addEventListener("pointercancel", endPan);
document.addEventListener("scroll", (e) => {
  const view = e.target.closest && e.target.closest(".graph-view");
  if (!view) return;
  const frame = view.closest(".graph-frame");
  const v = views.get(frame.dataset.graph) || {};
  v.left = view.scrollLeft;
  v.top = view.scrollTop;
  views.set(frame.dataset.graph, v);
}, true);
