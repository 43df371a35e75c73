"""The specviz playground: `python app.py`, then open http://127.0.0.1:7860.

Thin on purpose: the app lives in specviz.ui (layout and wiring), specviz.viz (HTML and figures)
and specviz.core.engine. The default models load in the background while the page comes up; the
first run converts them from GGUF and prints each stage here and in the page.
"""

from specviz.ui import build_demo, launch, warm_up

demo = build_demo()

if __name__ == "__main__":
    warm_up()
    launch(demo)
