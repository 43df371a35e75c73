"""The specviz playground: `python app.py`, then open http://127.0.0.1:7860.

Thin on purpose: the app lives in specviz.ui (layout and wiring), specviz.viz (HTML and figures)
and specviz.core.engine. The default models load in the background while the page comes up; the
first run converts them from GGUF and prints each stage here and in the page.

On a ZeroGPU Space the ``spaces`` package must be imported before anything imports torch (it
prepares torch's CUDA for the GPU it lends per call), so it comes first, where it is installed;
elsewhere it is not, and nothing changes (docs/hosting.md).
"""

try:
    import spaces  # noqa: F401 - before torch: ZeroGPU's GPU worker set-up
except ImportError:
    spaces = None

import logging  # noqa: E402
import threading  # noqa: E402

from specviz.ui import build_demo, launch, warm_up  # noqa: E402

demo = build_demo()


def native_kernels() -> str | None:
    """Say once in the log which kernels this server runs: specviz's native ones (built for this
    CPU the first time, in ``<cache>/kernels``) or PyTorch's (no C++ compiler here, a build that
    failed or another process's build still under way). -> None, or why not."""
    from specviz.runtime import int8_kernel
    from specviz.ui import zerogpu

    if zerogpu.active():  # the models run on the lent GPU: nothing here runs the CPU kernels
        why = "a ZeroGPU Space: the models run on the GPU it lends per call"
        logging.getLogger("specviz").info("specviz: no native CPU kernels: %s", why)
        return why
    return int8_kernel.load()


if __name__ == "__main__":
    threading.Thread(target=native_kernels, name="specviz-native-kernels", daemon=True).start()
    warm_up()
    launch(demo)
