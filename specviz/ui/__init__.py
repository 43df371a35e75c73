"""The Gradio app: ``build_demo()`` lays out the tabs, ``launch()`` serves it with the theme.

Gradio 6 takes the theme, CSS and head at ``launch()``, not ``gr.Blocks()``, so anything that
serves the demo should use :func:`launch` (or pass :func:`launch_kwargs` itself).

Environment variables: ``SPECVIZ_DEFAULT_TARGET``, ``SPECVIZ_DEFAULT_DRAFT``,
``SPECVIZ_DEFAULT_PROPOSER`` (a spec prefix; default ``ngram``, see specviz.app.runs), ``SPECVIZ_DEFAULT_PROMPT``,
``SPECVIZ_DEFAULT_MAX_NEW_TOKENS``, ``SPECVIZ_DEFAULT_TEMPERATURE``, ``SPECVIZ_DEFAULT_K`` (the playground's starting settings; the model boxes also take
local directories), ``SPECVIZ_CONCURRENCY`` (model runs at once across all users, default 2),
``SPECVIZ_HOST`` / ``SPECVIZ_PORT`` (default 127.0.0.1:7860; a Space sets ``GRADIO_SERVER_NAME``).
"""

from __future__ import annotations

import functools
import logging
import threading
from importlib import resources
from typing import Any, Callable

import gradio as gr

from .. import settings
from .blocks import Blocks

__all__ = ["build_demo", "css", "launch", "launch_kwargs", "theme", "warm_up"]

log = logging.getLogger("specviz.ui")

INTRO = """
<div class="sv-header">
  <h1>specviz <span class="sv-tag">speculative decoding, step by step</span></h1>
  <p>A cheap proposer drafts <b>k</b> tokens; the target model scores them all in one forward pass and keeps
  each draft with probability min(1, p/q). The first rejected draft is replaced by a token resampled from
  max(0, p − q), and if every draft survives a bonus token comes free. The output has exactly the target's distribution.</p>
</div>
"""


def css() -> str:
    """The app's stylesheet (shipped inside the package), then the lesson pieces' (specviz.viz.styles)."""
    from ..viz.styles import lesson_css

    return (resources.files("specviz") / "assets" / "style.css").read_text(encoding="utf-8") + "\n" + lesson_css()


def theme() -> gr.themes.Base:
    """A quiet theme on system fonts (nothing is fetched from the internet)."""
    sans = ["Inter", "ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"]
    mono = ["ui-monospace", "JetBrains Mono", "SFMono-Regular", "Menlo", "Consolas", "monospace"]
    return gr.themes.Soft(
        primary_hue="indigo", secondary_hue="teal", neutral_hue="slate", font=sans, font_mono=mono, radius_size="md",
    ).set(
        block_title_background_fill="transparent",
        block_title_padding="0",
        block_title_text_weight="600",
        block_title_text_color="*neutral_700",
        block_title_text_color_dark="*neutral_200",
        block_label_background_fill="transparent",
        block_label_text_color="*neutral_600",
        block_label_text_weight="600",
    )


def build_demo() -> gr.Blocks:
    """The whole app: Playground, plus the Benchmark and Learn tabs when their modules exist."""
    from .playground_tab import build_playground

    _warm_plotly()
    with Blocks(title="specviz: speculative decoding playground", analytics_enabled=False) as demo:
        gr.HTML(INTRO)
        with gr.Tabs():
            with gr.Tab("Playground", id="playground"):
                playground = build_playground()
            _optional_tab("Benchmark", "bench_tab", "build_bench_tab")
            # the Learn tab's "add my playground run" reads this browser's playground state
            _optional_tab("Learn", "learn_tab", "build_learn_tab", playground_state=playground.state)
    return demo


def _optional_tab(title: str, module: str, fn: str, **kwargs: Any) -> None:
    """A tab built by ``specviz.ui.<module>.<fn>(**kwargs)``, if that module is there."""
    try:
        mod = __import__(f"{__name__}.{module}", fromlist=[fn])
        build = getattr(mod, fn)
    except (ImportError, AttributeError) as e:  # not there (yet): the app works without it
        log.warning("no %s tab: %s", title, e)
        return
    with gr.Tab(title, id=title.lower()):
        try:
            build(**kwargs)
        except Exception as e:  # noqa: BLE001 - one broken tab must not take the playground down
            log.exception("the %s tab failed to build", title)
            from ..viz import message_html

            gr.HTML(message_html(f"The {title} tab could not be built ({type(e).__name__}: {e}).", "error"))


def _warm_plotly() -> None:
    """Plotly validates lazily; build one figure now so the first Step is not 200 ms slower."""
    from ..viz import empty_figure

    empty_figure("warm-up").to_json()


def launch_kwargs() -> dict[str, Any]:
    """Theme, CSS and the keyboard shortcuts' script for ``demo.launch()`` (Gradio 6 takes them there)."""
    from .lesson_view import page_js

    return {"theme": theme(), "css": css(), "js": page_js()}


def launch(demo: gr.Blocks | None = None, **kwargs: Any):
    """Queue and launch the demo on SPECVIZ_HOST:SPECVIZ_PORT (127.0.0.1:7860) unless given."""
    settings.foreign_default("GRADIO_ANALYTICS_ENABLED", "False")
    demo = demo or build_demo()
    kw: dict[str, Any] = {
        "server_name": settings.value("SPECVIZ_HOST") or settings.foreign("GRADIO_SERVER_NAME") or "127.0.0.1",
        "server_port": int(settings.value("SPECVIZ_PORT") or settings.foreign("GRADIO_SERVER_PORT") or 7860),
        "footer_links": ["gradio", "settings"],
        **launch_kwargs(),
    }
    kw.update(kwargs)
    try:
        return demo.queue().launch(**kw)
    except ValueError as e:
        # Gradio asks its new server once (a 3 s timeout) and gives up on a slow answer: on a busy machine
        # (a Space's cold start, CI beside other jobs) the server is up, only slow. Ask longer, then go on
        # as launch() would have: block unless told not to, return (app, local URL, share URL).
        if "localhost is not accessible" not in str(e) or not _answers(demo.local_url):
            raise
        logging.getLogger(__name__).warning("%s answered after Gradio's 3 s check: serving anyway", demo.local_url)
        if not kw.get("prevent_thread_lock"):
            demo.block_thread()
        return demo.server_app, demo.local_url, None


def _answers(url: str | None, budget_s: float = 120.0) -> bool:
    """Whether the server at ``url`` answers within ``budget_s`` (each try waits up to 10 s)."""
    import time

    import httpx

    deadline = time.monotonic() + budget_s
    while url and time.monotonic() < deadline:
        try:
            if httpx.head(url, timeout=10).status_code < 400:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def warm_up(names: list[str] | None = None) -> threading.Thread | None:
    """Prepare the default configuration in the background (the one *Show me a speedup* runs):
    load (and on the first run convert) its models, build each one's static decode step and
    choose its runner, then run it once for a few tokens, untimed, logging each stage
    (``specviz.app.warmup``). A run that needs those models meanwhile waits and its status line
    says what is being prepared. Once the defaults are ready, *Show me a rejection*'s draft (the
    int8 copy, read from its disk cache) follows at the lowest priority, unless the hosting limits
    leave no room for it beside them (then a log line says so). ``names``: other models, loaded
    and built only. Returns the thread (None when a preparation is already running)."""
    from ..app import warmup
    from .playground import Defaults
    from .state import USES_DRAFT_MODEL

    rehearse, later = None, None
    if names is None:
        d = Defaults.from_env()
        names = [d.target] + ([d.draft] if d.proposer in USES_DRAFT_MODEL else [])
        rehearse = functools.partial(_rehearse, d)
        later = tour_drafts(d)
        warmup.STARTUP.record = warmup.record_path()  # its total: the next start's "about N s" before a Step
    return warmup.prepare(names, rehearse=rehearse, later=later)


def tour_drafts(d: Any) -> dict[str, str]:
    """The draft models the tours run that the defaults do not load: {name: what for} (the
    rejection tour's draft; on a GPU its float model, the target itself when they are one)."""
    import torch

    from ..app import runs
    from .state import USES_DRAFT_MODEL

    values = runs.tour_settings("rejection", d, cuda=torch.cuda.is_available())
    draft = values["draft"] if values["proposer"] in USES_DRAFT_MODEL else None
    return {draft: "the rejection tour's draft"} if draft and draft != values["target"] else {}


def _rehearse(d: Any, say: Callable[[str], None]) -> None:
    """The default configuration, once, untimed: its decoder built as a Step builds it, then
    2 (k + 1) tokens of the default prompt (the prefill, and the verify pass at its width); then,
    on a machine with none cached, its target's verify cost (:func:`_measure_verify_cost`)."""
    from ..app import runs
    from .state import parse_settings

    settings = parse_settings(d.target, d.proposer, d.draft, d.k, d.temperature, d.top_p, d.top_k, d.seed,
                              d.max_new_tokens, d.prompt, True)
    decoder = runs.build_decoder(settings, say)
    session = decoder.start(settings.prompt, max_new_tokens=min(settings.max_new_tokens, 2 * (settings.k + 1)),
                            seed=settings.seed, chat=settings.chat)
    while not session.done:
        session.step()
    _measure_verify_cost(decoder.target, len(session.prompt_ids), settings, say)


def _measure_verify_cost(target: Any, prompt_tokens: int, settings: Any, say: Callable[[str], None]) -> None:
    """This machine's verify cost t(n), n = 1..17, of the default target, measured once per machine
    into the advisor's cache (``specviz.analysis.costmodel``) when none is there: the What-if's curve,
    its card's best k and Learn part 5 read it, so a fresh machine's first run tells them one story.
    ``prompt_tokens``: the default prompt's length as the rehearsal encoded it (the context is the advisor's)."""
    from ..analysis.costmodel import context_for, load_or_measure
    from ..app import runs
    from ..learn.hardware import measured_curve
    from ..models import cache_dir
    from . import zerogpu

    if zerogpu.active():  # the runs time a GPU lent per call, not this process's device: nothing to measure here
        return
    if measured_curve(cache_dir(), runs.base_name(settings.target)) is not None:
        return
    say(f"measuring {target.name}'s verify cost t(n), n = 1..17, on this machine (once: the What-if and Learn part 5 read it)")
    load_or_measure(target, cache_dir(), context=context_for([prompt_tokens], settings.max_new_tokens),
                    sampling=settings.sampling)
