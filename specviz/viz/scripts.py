"""Browser-side scripts for the token and draft-table HTML (``gr.HTML(js_on_load=...)``), and
the page's arrival script.

They go with the markup :mod:`specviz.viz.tokens` writes (its classes and ``data-*`` attributes):
tooltips on tokens (on hover, or on a tap on a phone), clicks that pick a token or a draft-table row, and a status message that
carries ``data-arrive`` (:func:`specviz.viz.tokens.message_html`): a guided tour's moment, scrolled
into view and focused when the message appears.
"""

TOKENS_JS = r"""
const pickable = element.classList.contains('sv-pickable');
let tip = document.getElementById('sv-tip');
if (!tip) { tip = document.createElement('div'); tip.id = 'sv-tip'; tip.className = 'sv-tip'; document.body.appendChild(tip); }
let current = null, tapped = null;  // tapped: {step, nth} of the token a tap showed
const hide = () => { tip.style.display = 'none'; current = null; tapped = null; };
const keyOf = (t) => ({step: t.dataset.step, nth: [...element.querySelectorAll(`.tok[data-step="${t.dataset.step}"]`)].indexOf(t)});
const find = (k) => k && element.querySelectorAll(`.tok[data-step="${k.step}"]`)[k.nth] || null;
const place = () => {
  if (current && !document.body.contains(current) && find(tapped)) {  // the pick redrew the text: the same token
    current = find(tapped); tip.textContent = current.dataset.tip;
  }
  if (!current || !document.body.contains(current)) { hide(); return; }
  const r = current.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
  if (r.bottom < 0 || r.top > window.innerHeight) { hide(); return; }
  const x = Math.min(Math.max(8, r.left), window.innerWidth - w - 8);
  let y = r.bottom + 6; if (y + h > window.innerHeight - 8) y = Math.max(8, r.top - h - 6);
  tip.style.left = x + 'px'; tip.style.top = y + 'px';
};
const show = (t) => { current = t; tip.textContent = t.dataset.tip; tip.style.display = 'block'; place(); };
element.addEventListener('mouseover', (e) => { const t = e.target.closest('.tok[data-tip]'); if (t && !tapped) show(t); });
element.addEventListener('mouseout', (e) => { const t = e.target.closest('.tok[data-tip]'); if (t && !tapped && !t.contains(e.relatedTarget)) hide(); });
element.addEventListener('mouseleave', () => { if (!tapped) hide(); });
// a touch has no hover: a tapped token's numbers stay until the next tap elsewhere (the page moving
// under the finger as the pick redraws it must not hide them)
let touch = false;
element.addEventListener('pointerdown', (e) => { touch = e.pointerType !== 'mouse'; }, true);
document.addEventListener('click', (e) => { if (tapped && !element.contains(e.target)) hide(); }, true);
window.addEventListener('scroll', place, true);  // follow the token (or hide when it scrolls away)
// a tap (a phone has no hover) shows the numbers too, and they stay while the pick redraws the text
const follow = (n) => { if (tapped && n > 0) { place(); setTimeout(() => follow(n - 1), 150); } };
element.addEventListener('click', (e) => {
  const t = e.target.closest('.tok[data-step]'); if (!t) return;
  show(t);
  if (touch) { tapped = keyOf(t); follow(20); }
  if (pickable) trigger('pick', {step: Number(t.dataset.step), pos: Number(t.dataset.pos)});
});
"""


TABLE_JS = r"""
element.addEventListener('click', (e) => {
  const row = e.target.closest('tr[data-pos]'); if (!row) return;
  trigger('pick', {pos: Number(row.dataset.pos)});
});
"""


# A page script (launch(js=...)): when a status message with data-arrive="moment extra ..." appears
# (a tour that says it has arrived), scroll so that the moment and as many of the extras (the
# controls the tour's text names) as fit with it lie inside the viewport, centred, then focus the
# moment (tabindex -1: a focus ring shows where to look, the keys keep working). It looks for such
# a message every 100 ms (a new one by its ids and data-visit: Gradio updates the element in place);
# charts drawn after the message can shift the page, so it checks again for 1.5 s.
# body[data-sv-arrived] names the moment once it is in view (for tests).
ARRIVE_JS = r"""() => {
  if (window.__svArrive) return;
  window.__svArrive = true;
  const PAD = 8;
  const shown = (id) => { const el = document.getElementById(id); return el && el.offsetParent !== null ? el : null; };
  const inView = (el) => { const r = el.getBoundingClientRect(); return r.top >= -1 && r.bottom <= window.innerHeight + 1; };
  const place = (ids) => {
    const els = ids.map(shown).filter(Boolean);
    if (!els.length) return null;
    const room = window.innerHeight - 2 * PAD;
    let top = Infinity, bottom = -Infinity;
    const kept = els.filter((el, i) => {
      const r = el.getBoundingClientRect(), t = Math.min(top, r.top), b = Math.max(bottom, r.bottom);
      if (i > 0 && b - t > room) return false;  // an extra that does not fit with the moment stays out
      top = t; bottom = b; return true;
    });
    const slack = Math.max(0, room - (bottom - top));
    window.scrollTo({top: window.scrollY + top - PAD - slack / 2, behavior: "instant"});
    return kept;
  };
  const arrive = (ids) => {
    const kept = place(ids);
    if (!kept) return;
    const moment = kept[0];
    moment.setAttribute("tabindex", "-1");
    moment.classList.add("sv-arrived");
    moment.focus({preventScroll: true});
    document.body.dataset.svArrived = ids[0];
    for (const ms of [250, 750, 1500]) setTimeout(() => { if (!kept.every(inView)) place(ids); }, ms);
  };
  const check = (msg, tries) => {  // the moment may be shown a tick after the message: try again for 2 s
    const ids = msg.dataset.arrive.split(" ").filter(Boolean);
    if (shown(ids[0])) arrive(ids);
    else if (tries > 0 && document.body.contains(msg)) setTimeout(() => check(msg, tries - 1), 100);
  };
  setInterval(() => {  // a poll: a MutationObserver on the page missed Gradio's later updates
    const msg = document.querySelector("#sv-status .sv-msg[data-arrive]");
    // Gradio updates the status element in place: a new arrival is told by its ids and visit, not its node
    const visit = msg ? msg.dataset.arrive + " " + msg.dataset.visit : null;
    if (!msg || msg.__svVisit === visit) return;
    msg.__svVisit = visit;
    check(msg, 20);
  }, 100);
}"""
