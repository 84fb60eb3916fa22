// The admin page's script: no inline script or handler anywhere, so the page's
// Content-Security-Policy allows scripts from this file only.
"use strict";

// Every few seconds, fetch this page again and swap each `data-live` element's content with the
// same element's in the fresh page (by id), keeping the boxes the user ticked; a region the user
// is typing in is left alone. A sign-in redirect or an error leaves the page as it is; a hidden
// tab does not poll. Pages without live regions do not poll.
document.addEventListener("DOMContentLoaded", () => {
  if (!document.querySelector("[data-live]")) return;
  (()=>{const tick=async()=>{if(document.hidden)return;try{const r=await fetch(location.href,{credentials:'same-origin'});if(!r.ok||r.redirected)return;const d=new DOMParser().parseFromString(await r.text(),'text/html');for(const e of document.querySelectorAll('[data-live]')){const n=d.getElementById(e.id);const a=document.activeElement;if(!n||n.innerHTML===e.innerHTML||(a&&e.contains(a)&&a.tagName==='INPUT'&&a.type!=='checkbox'))continue;const keep=new Set([...e.querySelectorAll('input[type=checkbox]:checked')].map(b=>b.id||b.value));const f=a&&e.contains(a)?(a.id||a.value):null;e.innerHTML=n.innerHTML;for(const b of e.querySelectorAll('input[type=checkbox]')){if(keep.has(b.id||b.value))b.checked=true;if(f&&(b.id||b.value)===f)b.focus()}}}catch(_){}};setInterval(tick,3000)})()
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
