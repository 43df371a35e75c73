"""``specviz serve``, ``specviz tune`` and ``specviz models``: the app, this machine's kernel plans, the built-in models."""

from __future__ import annotations

import json
import sys

from .. import settings
from .common import CLIError, options_of, say, set_threads


def cmd_serve(args) -> int:
    try:
        from .. import ui
    except ImportError as exc:
        raise CLIError(f"the app is not available ({exc})") from exc
    build = getattr(ui, "build_demo", None)
    if build is None:
        raise CLIError("the app is not available (specviz.ui has no build_demo)")
    settings.foreign_default("GRADIO_ANALYTICS_ENABLED", "False")
    demo = build()
    launch = getattr(ui, "launch", None)  # queues and applies the app's theme and CSS (Gradio 6: at launch)
    if launch is not None:
        launch(demo, server_name=args.host, server_port=args.port)
    else:
        demo.queue().launch(server_name=args.host, server_port=args.port)
    return 0


def cmd_tune(args) -> int:
    """Measure each target's kernel plan on this machine once and write its file (read at every load)."""
    from ..app.warmup import tune_targets

    set_threads(args)
    print("\n".join(tune_targets(args.target or ["gemma-3-270m"], args.dtype, args.again, lambda m: say(args, m),
                                  options=options_of(args))))
    return 0


def cmd_models(args) -> int:
    from ..models import cache_dir, list_models

    models = list_models()
    if args.json:
        json.dump(models, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    width = max(len(m["name"]) for m in models)
    for m in models:
        state = ("available" + (", converted" if m.get("cached") else ", converted on first use")) if m["available"] else (
            f"not installed: {m['how_to_install']}")
        print(f"{m['name'].ljust(width)}  {state}\n{' ' * width}  {m['description']}")
    print(f"\nconverted copies live in {cache_dir()}; any local model directory or hub id (owner/name) works too, "
          "and NAME@int8 quantizes a model to int8")
    return 0
