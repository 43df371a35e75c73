"""Browser-side scripts for the token and draft-table HTML (``gr.HTML(js_on_load=...)``).

They go with the markup :mod:`specviz.viz.tokens` writes (its classes and ``data-*`` attributes):
tooltips on tokens, and clicks that pick a token or a draft-table row.
"""

TOKENS_JS = r"""
const pickable = element.classList.contains('sv-pickable');
let tip = document.getElementById('sv-tip');
if (!tip) { tip = document.createElement('div'); tip.id = 'sv-tip'; tip.className = 'sv-tip'; document.body.appendChild(tip); }
let current = null;
const hide = () => { tip.style.display = 'none'; current = null; };
const place = () => {
  if (!current || !document.body.contains(current)) { hide(); return; }
  const r = current.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
  if (r.bottom < 0 || r.top > window.innerHeight) { hide(); return; }
  const x = Math.min(Math.max(8, r.left), window.innerWidth - w - 8);
  let y = r.bottom + 6; if (y + h > window.innerHeight - 8) y = Math.max(8, r.top - h - 6);
  tip.style.left = x + 'px'; tip.style.top = y + 'px';
};
const show = (t) => { current = t; tip.textContent = t.dataset.tip; tip.style.display = 'block'; place(); };
element.addEventListener('mouseover', (e) => { const t = e.target.closest('.tok[data-tip]'); if (t) show(t); });
element.addEventListener('mouseout', (e) => { const t = e.target.closest('.tok[data-tip]'); if (t && !t.contains(e.relatedTarget)) hide(); });
element.addEventListener('mouseleave', hide);
window.addEventListener('scroll', place, true);  // follow the token (or hide when it scrolls away)
element.addEventListener('click', (e) => {
  const t = e.target.closest('.tok[data-step]'); if (!t) return;
  show(t);
  if (pickable) trigger('pick', {step: Number(t.dataset.step), pos: Number(t.dataset.pos)});
});
"""


TABLE_JS = r"""
element.addEventListener('click', (e) => {
  const row = e.target.closest('tr[data-pos]'); if (!row) return;
  trigger('pick', {pos: Number(row.dataset.pos)});
});
"""
