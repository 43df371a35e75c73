"""The engineer's Benchmark sweep and Advisor walk (issue 52, items 5 and 6), for benchmarks/persona_walk.py.

On the Benchmark tab of a served app: a small sweep (the tab's default proposers, the chosen k, two
prompts), then "Measure verify cost" (the readout's best-k paragraph), then the Advisor on the same
prompts and k: Calibrate and predict, Run the top N. Every check reads the page (the plots'
Plotly data, the readout, the table, the Advisor's message and tables) and compares it with the
sweep's own report, downloaded from the page's JSON button. Each check is one ``say(item, ok,
seen)`` line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

PROGRESS = "#sv-bench-progress .sv-bench-progress"
ADVISOR_MSG = "#sv-advisor-msg .sv-bench-progress"
TINY_PROMPTS = "the cat sat on the mat. the cat sat on the mat. the cat sat on the\nabc abc abc abc abc abc abc abc abc"
WIDE = 0.25  # specviz.analysis.noise.WIDE: an interval wider than this share of its point is wide
Say = Callable[[str, bool, str], None]


@dataclass(frozen=True)
class SweepPlan:
    ks: tuple[int, ...] = (1, 2, 4)
    prompts: int = 2
    max_new: int = 32
    custom: str = ""  # "" = the bundled Spec-Bench prompts
    top_n: int = 2
    timeout_ms: int = 900_000


def _kind(page, sel: str, kinds: tuple[str, ...], timeout_ms: int) -> str:
    page.wait_for_function("([s, kinds]) => { const el = document.querySelector(s); return el && kinds.includes(el.dataset.kind); }",
                           arg=[sel, list(kinds)], timeout=timeout_ms, polling=500)
    return page.locator(sel).get_attribute("data-kind")


def _fill(page, sel: str, value: Any) -> None:
    box = page.locator(f"{sel} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def _tick(page, sel: str, wanted: set[int]) -> None:
    for label in page.locator(f"{sel} label").all():
        k = int(label.inner_text().strip())
        if label.locator("input").is_checked() != (k in wanted):
            label.click()


def _prompts(page, prefix: str, plan: SweepPlan) -> None:
    if plan.custom:
        page.locator(f"#sv-{prefix}-source label").filter(has_text="My prompts").click()
        page.locator(f"#sv-{prefix}-custom textarea").fill(plan.custom)
    _fill(page, f"#sv-{prefix}-n", plan.prompts)
    _fill(page, f"#sv-{prefix}-max-new", plan.max_new)


def _figures(page) -> dict[str, list[dict]]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[id^=sv-bench-plot-]')].map((el) => {
      const d = el.querySelector('.js-plotly-plot'); return [el.id.replace('sv-bench-plot-', ''), (d && d.data || []).map((t) =>
      ({name: t.name, meta: t.meta ?? null, x: t.x, y: t.y, error_y: t.error_y ? {array: t.error_y.array, arrayminus: t.error_y.arrayminus} : null}))];
      }))""")


def _table(page) -> list[dict[str, str]]:
    """The Benchmark table as the page shows it: {header: cell text} per row."""
    return page.evaluate("""() => { const t = document.querySelector('#sv-bench-table'); if (!t) return [];
      const cells = (row) => [...row.querySelectorAll('[role=cell], [role=gridcell], td, th')].map((c) => c.innerText.trim());
      const heads = cells(t.querySelector('thead tr, [role=row]'));  // Gradio's body rows are divs with role=row
      return [...t.querySelectorAll('div[role=row], tbody tr')].map((row) => Object.fromEntries(cells(row)
        .map((v, i) => [heads[i], v]))).filter((r) => r.proposer); }""")


def _download(page, sel: str) -> dict:
    with page.expect_download() as dl:
        page.locator(f"{sel} button, button{sel}").first.click()
    return json.loads(Path(dl.value.path()).read_text(encoding="utf-8"))


def _speed(r: dict) -> float | None:
    v = r.get("speedup_median")
    return v if isinstance(v, (int, float)) else r.get("speedup")


def sweep(page, plan: SweepPlan, say: Say) -> dict:
    """Run the sweep; check item 5 on its plots, table and readout; -> the report (the page's JSON)."""
    page.get_by_role("tab", name="Benchmark").click()
    page.wait_for_selector("#sv-bench-run")
    _tick(page, "#sv-bench-ks", set(plan.ks))
    _prompts(page, "bench", plan)
    page.click("#sv-bench-run")
    kind = _kind(page, PROGRESS, ("ok", "error"), plan.timeout_ms)
    said = page.inner_text("#sv-bench-progress")
    say("5-run", kind == "ok", f"sweep ks={list(plan.ks)} on {plan.prompts} prompts: {said[:220]!r}")
    if kind != "ok":
        return {}
    page.wait_for_function("() => !document.querySelector('#sv-bench-json button, button#sv-bench-json').disabled")
    report = _download(page, "#sv-bench-json")
    rows = [r for r in report["rows"] if r.get("impl") == "specviz" and r.get("k")]
    chains = {r["proposer"] for r in rows if not r.get("tree")}
    # the last frame's plots: every configuration drawn
    page.wait_for_function("(n) => { const d = document.querySelector('#sv-bench-plot-speedup .js-plotly-plot');"
                           " return d && d.data && d.data.filter((t) => !t.meta).reduce((s, t) => s + t.x.length, 0) >= n; }",
                           arg=len(rows), timeout=60_000)
    figs, table = _figures(page), _table(page)
    _intervals(figs, table, rows, report, say)
    _marks(figs, table, rows, say)
    _theories(figs, chains, rows, say)
    page.click("#sv-bench-verify")
    vkind = _kind(page, "#sv-bench-verify-msg .sv-bench-progress", ("ok", "error"), plan.timeout_ms)
    page.wait_for_function("() => document.querySelector('#sv-bench-why').innerText.includes('verify curve decides')"
                           " || document.querySelector('#sv-bench-verify-msg .sv-bench-progress').dataset.kind === 'error'",
                           timeout=60_000)
    figs = _figures(page)
    _theories(figs, chains, rows, say, only="tree_speedup")
    _readout(page.inner_text("#sv-bench-why"), rows, say, vkind)
    return report


def _intervals(figs: dict, table: list[dict], rows: list[dict], report: dict, say: Say) -> None:
    """Item 5: each measured speedup point on the plots carries its interval, and the table's."""
    meta = report.get("meta") or {}
    per = {(r["proposer"], r["k"]): r for r in rows}
    for name in ("speedup", "predicted", "tree_speedup"):
        lines = [t for t in figs.get(name, []) if not t["meta"] and "predicted" not in (t["name"] or "")
                 and "theory" not in (t["name"] or "")]
        points = sum(len(t["x"]) for t in lines)
        bars = [t for t in lines if t["error_y"] and len(t["error_y"]["array"] or []) == len(t["x"])]
        right = 0
        for t in bars:
            who = re.sub(r" (measured|\(hf\))$", "", t["name"].split(" depth ")[0])
            for x, y, up, down in zip(t["x"], t["y"], t["error_y"]["array"], t["error_y"]["arrayminus"]):
                r = (per.get((who, x)) if name != "tree_speedup" else  # there x is nodes per step, not k
                     next((q for q in rows if q["proposer"] == who and q.get("nodes_per_step") == x), None))
                right += bool(r and abs(y + up - r["speedup_high"]) < 1e-6 and abs(y - down - r["speedup_low"]) < 1e-6)
        say("5-interval", points > 0 and right == points,
            f"{name} plot: {right} of {points} measured speedup points carry the report's 90% interval "
            f"({len(lines)} lines; {meta.get('repeats', 1)} pass(es) x {len({p['prompt_id'] for p in report.get('prompt_rows', [])})} prompts)")
    band = [r for r in table if r.get("k") not in ("0", "") and r.get("impl") == "specviz"]
    one = {(r["proposer"], str(r["k"])) for r in rows if r.get("speedup_low") == r.get("speedup_high")}
    bare = [r for r in band if (r["proposer"], r["k"]) in one and "one run" not in r.get("90% interval", "")]
    say("5-interval", band and all(r.get("90% interval") for r in band) and not bare,
        f"{len(one)} configurations rest on one run; shown as a zero-width band without saying so: {len(bare)}")
    say("5-interval", band and all(r.get("90% interval") for r in band),
        f"table: {sum(1 for r in band if r.get('90% interval'))} of {len(band)} configurations show a 90% interval: "
        + "; ".join(f"{r['proposer'][:24]} k={r['k']}: {r.get('median speedup')} [{r.get('90% interval')}]" for r in band[:6]))


def _marks(figs: dict, table: list[dict], rows: list[dict], say: Say) -> None:
    """Item 5: every prefill-dominated or stalled configuration the table names is marked on the k plots."""
    named = [("prefill", r["proposer"], int(r["k"])) for r in table if r.get("prefill-dominated runs") and r.get("k") not in ("0", "")]
    named += [("stall", r["proposer"], int(r["k"])) for r in table if r.get("stalled runs") and r.get("k") not in ("0", "")]
    for name in ("speedup", "latency", "predicted"):
        marks = [t for t in figs.get(name, []) if t["meta"] in ("prefill", "stall")]
        drawn = sorted((t["meta"], k) for t in marks for k in t["x"])  # one mark per configuration: counted, not a set
        want = sorted((kind, k) for kind, _, k in named)
        say("5-marks", drawn == want,
            f"{name} plot: marks at {sorted(drawn)}; the table names {sorted(named)}"
            + ("" if named else " (no run prefill-dominated or stalled in this sweep: nothing to mark)"))


def _theories(figs: dict, chains: set[str], rows: list[dict], say: Say, only: str | None = None) -> None:
    """Item 5: one theory line per chain proposer, at that proposer's own pooled a; none pools two."""
    for name in ([only] if only else ["tree_tau", "tree_speedup", "acceptance_length"]):
        lines = [t for t in figs.get(name, []) if t["meta"] == "theory" or "theory" in (t["name"] or "")]
        owners = [next((p for p in sorted(chains, key=len, reverse=True) if (t["name"] or "").startswith(p + ":")), None)
                  for t in lines]
        pooled = {}
        for p in chains:
            mine = [r for r in rows if r["proposer"] == p and not r.get("tree") and r.get("drafted")]
            pooled[p] = sum(r.get("accepted") or 0 for r in mine) / max(1, sum(r["drafted"] for r in mine))
        wrong = [t["name"] for t, o in zip(lines, owners) if o is None
                 or (name != "acceptance_length" and f"a={pooled[o]:.2f}" not in t["name"])]
        once = name == "acceptance_length" or sorted(o for o in owners if o) == sorted(chains)
        say("5-theory", bool(lines) and not wrong and once,
            f"{name}: {len(lines)} theory lines for {len(chains)} chain proposers; each its own a: {not wrong} "
            f"({'; '.join((t['name'] or '')[:70] for t in lines[:4])})")


def _readout(text: str, rows: list[dict], say: Say, vkind: str) -> None:
    """Item 5: the readout's best and worst are the measured extremes, never the same; a proposer's
    "fastest measured k" is its best in the table; a theory's best k the sweep measured slower is said so."""
    ranked = sorted(rows, key=lambda r: _speed(r) or 0.0)
    best = re.search(r"Best: (\S+) k=(\d+)", text)
    worst = re.search(r"Worst: (\S+) k=(\d+)", text)
    top, low = ranked[-1], ranked[0]
    ok = (best and (best[1], int(best[2])) == (top["proposer"], top["k"]) and worst
          and (worst[1], int(worst[2])) == (low["proposer"], low["k"]) and best[0][6:] != worst[0][7:])
    say("5-readout", bool(ok), f"Best {best and best[0][6:]!r} / Worst {worst and worst[0][7:]!r}; the report's extremes "
        f"{top['proposer'][:30]} k={top['k']} ({_speed(top):.2f}x), {low['proposer'][:30]} k={low['k']} ({_speed(low):.2f}x)")
    found = re.findall(r"\S+: fastest measured k = [^\n]*", text)  # the list's items (inner text: no "- ")
    if vkind != "ok" or not found:
        say("5-readout", False, f"no best-k paragraph after Measure verify cost ({vkind})")
        return
    for line in found:
        name, fast, theory = re.match(r"(\S+): fastest measured k = (\d+),.*?theory's best k (\d+)", line).groups()
        mine = [r for r in rows if r["proposer"] == name and not r.get("tree")]
        argmax = max(mine, key=lambda r: _speed(r) or 0.0)["k"] if mine else None
        ran = {r["k"]: r for r in mine}
        slower = int(theory) in ran and int(theory) != argmax
        said = "keep k = " in line and "no faster" in line
        worst_named = worst and (worst[1], int(worst[2])) == (name, int(theory))
        fine = int(fast) == argmax and (said if slower else True) and (not worst_named or "ranked worst" in line)
        say("5-readout", fine, f"{name[:30]}: fastest measured k = {fast} (table: {argmax}); theory's best k {theory}"
            f"{' (measured, slower: the line says so)' if slower and said else ''}: {line[:260]!r}")


def advisor(page, plan: SweepPlan, say: Say, report: dict) -> None:
    """Items 5 and 6 in the Advisor: the pick among the sweep's k; after Run the top N, the next step,
    the tau error scored beside the speedup's, and a wide interval explained."""
    page.locator("#sv-bench-advisor").get_by_text("Advisor: will it pay here?").first.click()
    page.wait_for_selector("#sv-advisor-calibrate", state="visible")
    _prompts(page, "advisor", plan)
    page.click("#sv-advisor-calibrate")
    kind = _kind(page, ADVISOR_MSG, ("ok", "error"), plan.timeout_ms)
    msg = page.inner_text("#sv-advisor-msg")
    pick = re.search(r"Next step: use (\S+) at k = (\d+)", msg)
    why_not = "none of the k you will run" in msg or "nothing is predicted to pay" in msg
    say("5-pick", kind == "ok" and ((pick and int(pick[2]) in plan.ks) or why_not),
        f"ticked k {list(plan.ks)}; the advisor says: {msg[:400]!r}")
    if kind != "ok":
        return
    _beside(msg, pick, report, say)
    _fill(page, "#sv-advisor-top-n", plan.top_n)
    page.wait_for_function("() => !document.querySelector('#sv-advisor-run').disabled", timeout=30_000)
    page.click("#sv-advisor-run")
    page.wait_for_function("(s) => { const el = document.querySelector(s); return el && (el.dataset.kind === 'error' || "
                           "(el.dataset.kind === 'ok' && el.innerText.includes('Ran '))); }", arg=ADVISOR_MSG,
                           timeout=plan.timeout_ms, polling=500)
    end = page.inner_text("#sv-advisor-msg")
    runs = page.evaluate("""() => { const t = document.querySelector('#sv-advisor-runs table'); if (!t) return [];
      const heads = [...t.querySelectorAll('thead th')].map((th) => th.innerText.trim());
      return [...t.querySelectorAll('tbody tr')].map((tr) => Object.fromEntries([...tr.querySelectorAll('td')]
        .map((td, i) => [heads[i], td.innerText.trim()]))); }""")
    nxt = re.search(r"Next step: (use \S+ at k = \d+|nothing is predicted to pay)", end)
    auto = "--proposer auto` now" in end
    smaller = "smaller k" in end or "No smaller k" in end or "nothing is predicted" in end
    say("6-next", bool(nxt and auto and smaller), f"the Advisor's end: {end[:500]!r}")
    scored = re.search(r"Mean absolute error: speedup (\d+)%, tau (\d+)%", end)
    say("6-tau", bool(scored), f"errors scored: {scored and scored[0]!r}; runs table: {runs}")
    _wide(end, runs, say)


def _beside(msg: str, pick, report: dict, say: Say) -> None:
    """Item 5: the pick set beside what the sweep on the page measured, and a configuration it measured
    above the pick's interval named."""
    rows = [r for r in report.get("rows", []) if r.get("impl") == "specviz" and r.get("k") and _speed(r) is not None]
    mine = pick and next((r for r in rows if r["proposer"] == pick[1] and r["k"] == int(pick[2])), None)
    if not mine:
        say("5-pick", not pick or "did not run" in msg, f"the pick {pick and pick[0]!r} was not in the sweep: {msg[-300:]!r}")
        return
    best = max(rows, key=_speed)
    above = best is not mine and _speed(best) > (mine.get("speedup_high") or _speed(mine))
    named = f"measured {best['proposer']} at k = {best['k']}" in msg
    decided = "measurement decides" in msg  # said only of a configuration with an interval clear of the pick's
    clear = best.get("speedup_low") is not None and best["speedup_low"] < best["speedup_high"] \
        and best["speedup_low"] > (mine.get("speedup_high") or _speed(mine))
    say("5-pick", "measured the pick at" in msg and (named if above else not named) and decided == (above and clear),
        f"the sweep measured the pick {_speed(mine):.2f}x [{mine.get('speedup_low'):.2f}-{mine.get('speedup_high'):.2f}], its best "
        f"{best['proposer'][:30]} k={best['k']} {_speed(best):.2f}x: {msg[msg.find('The sweep above'):][:300]!r}")


def _band(text: str) -> tuple[float, float] | None:
    m = re.match(r"([\d.]+)-([\d.]+)x", text or "")
    return (float(m[1]), float(m[2])) if m else None


def _wide(end: str, runs: list[dict], say: Say) -> None:
    """Item 6: every wide interval the runs table shows (or the message names) is explained in words."""
    shown = []
    for r in runs:
        median = re.match(r"([\d.]+x) \(([\d.]+-[\d.]+x)\)", r.get("median (90%)", ""))
        for col, band_text, point in (("loop 95%", r.get("loop 95%", ""), r.get("loop pred")),
                                      ("median (90%)", median and median[2], median and median[1])):
            band, mid = _band(band_text or ""), re.match(r"([\d.]+)x", point or "")
            if band and mid and (band[1] - band[0] > WIDE * float(mid[1]) or band[0] <= 1.0 <= band[1]):
                shown.append((r["configuration"], col, band_text))
    explained = [s for s in shown if f"{s[0]}'s {'predicted ' if s[1] == 'loop 95%' else ''}interval {s[2]}" in end]
    say("6-wide", len(explained) == len(shown), f"wide intervals shown {shown}; explained in the message: {len(explained)}")


def walk(browser, url: str, size: str, w: int, h: int, shots: str | None, plan: SweepPlan, check) -> None:
    """The whole engineer walk of the Benchmark tab and the Advisor at one size (``check`` as in persona_walk)."""
    page = browser.new_context(viewport={"width": w, "height": h}).new_page()
    page.set_default_timeout(240_000)
    page.goto(url)
    page.wait_for_selector("#sv-step-btn")

    def say(item: str, ok: bool, seen: str) -> None:
        check(size, "engineer", item, ok, seen)

    try:
        report = sweep(page, plan, say)
        if shots:
            page.screenshot(path=str(Path(shots) / f"engineer-bench-{size}.png"), full_page=True)
        if report:
            advisor(page, plan, say, report)
        if shots:
            page.locator("#sv-bench-advisor").screenshot(path=str(Path(shots) / f"engineer-advisor-{size}.png"))
    finally:
        page.context.close()
