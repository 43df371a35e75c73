"""Safe to host: the hosting limits, the Benchmark and Learn tabs' checks, the model cache's
memory budget, and HTML escaping of token text. (Bad input through the playground's handlers is
in test_playground.py.)
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from specviz import models as M
from specviz.app import limits as L
from specviz.proposers import REGISTRY
from tests.support import make_llama

# -- the limits themselves -----------------------------------------------------------------------


def test_limits_defaults_and_env(monkeypatch):
    for var in ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_K", "SPECVIZ_ALLOW_LOCAL_PATHS",
                "SPECVIZ_MODEL_MEMORY_GB"):
        monkeypatch.delenv(var, raising=False)
    assert L.Limits.from_env() == L.Limits(2048, 512, 16, False, None)
    monkeypatch.setenv("SPECVIZ_MAX_K", "4")
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("SPECVIZ_MODEL_MEMORY_GB", "1.5")
    lim = L.Limits.from_env()
    assert lim.max_k == 4 and lim.allow_local_paths and lim.model_memory_gb == 1.5
    monkeypatch.setenv("SPECVIZ_MAX_K", "lots")
    with pytest.raises(ValueError, match="SPECVIZ_MAX_K"):
        L.Limits.from_env()


@pytest.mark.parametrize("name", ["/etc", "./m", "../m", "~/m", "~root", "a/b/c", "owner/..", "C:\\models\\x",
                                  "..\\x", "owner/na..me", "", "  ", "x" * 300, "bad\x00name", "a\nb"])
def test_check_model_name_refuses_paths(name, tmp_path):
    with pytest.raises(ValueError):
        L.check_model_name(name, L.Limits())


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m@int8", "HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-0.5B@int8"])
def test_check_model_name_allows_builtins_and_hub_ids(name):
    assert L.check_model_name(name, L.Limits()) == name


def test_check_model_name_refuses_an_existing_directory_named_like_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "owner" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="local paths are disabled"):
        L.check_model_name("owner/model", L.Limits())
    assert L.check_model_name("owner/model", L.Limits(allow_local_paths=True)) == "owner/model"


def test_token_and_length_checks():
    lim = L.Limits(max_prompt_tokens=10, max_new_tokens=5, max_k=3)
    L.check_prompt_tokens(10, lim)
    L.check_max_new_tokens(5, lim)
    L.check_k(3, lim)
    for fn, bad in ((L.check_prompt_tokens, 11), (L.check_max_new_tokens, 6), (L.check_max_new_tokens, 0),
                    (L.check_k, 4), (L.check_k, 0)):
        with pytest.raises(ValueError):
            fn(bad, lim)
    with pytest.raises(ValueError, match="too long"):
        L.check_prompt_chars("x" * 161, lim)


def test_the_cli_still_takes_local_directories(models_dir, monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "0")
    lm = M.load_model(models_dir["target"])  # load_model itself does not apply the web limits
    assert lm.vocab_size > 0


# -- model cache: memory budget, pins, one load per name -----------------------------------------


def test_memory_budget_evicts_by_bytes_but_never_a_pinned_model(models_dir, monkeypatch):
    M.clear_model_cache()
    monkeypatch.setenv("SPECVIZ_MODEL_CACHE_SIZE", "10")
    target = M.load_model(models_dir["target"])
    one = M.model_bytes(target)
    assert one > 0
    monkeypatch.setenv("SPECVIZ_MODEL_MEMORY_GB", str(1.2 * one / (1 << 30)))  # room for one tiny model
    with M.model_in_use(target):
        draft = M.load_model(models_dir["draft"])
        assert M.load_model(models_dir["target"]) is target  # pinned: kept, over budget
        assert M.load_model(models_dir["draft"]) is draft
    M.load_model(models_dir["bpe"])  # nothing pinned now: the older ones go
    keys = [k[0] for k in M.cache._cache]
    assert len(keys) == 1 and keys[0].endswith("bpe-draft")
    M.clear_model_cache()


def test_concurrent_loads_of_one_name_load_once(models_dir, monkeypatch):
    M.clear_model_cache()
    real, calls = M.loading._load_float, []

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(M.loading, "_load_float", counting)
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(M.load_model(models_dir["target"]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(out) == 4 and all(o is out[0] for o in out)
    M.clear_model_cache()


# -- escaping and other safety properties ----------------------------------------------------------


def test_token_text_is_html_escaped(tmp_path):
    """A tokenizer whose tokens are markup: the token view shows them as text, never as HTML."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from specviz import viz
    from specviz.core.engine import SpeculativeDecoder
    from specviz.core.records import Sampling
    from specviz.proposers import NGram

    evil = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '"onmouseover="alert(1)', "&amp;"]
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *evil, "a"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                  pad_token="<pad>")
    model = make_llama(len(tok), 32, 2, seed=0)
    lm = M.LoadedModel(model, tok, "evil", torch.device("cpu"), torch.float32)
    dec = SpeculativeDecoder(lm, NGram(), k=2, sampling=Sampling(temperature=1.0))
    session = dec.start("a " + " ".join(evil), max_new_tokens=12, seed=0, chat=False)
    while not session.done:
        session.step()
    texts = {t for s in session.steps for t in s.committed_text}
    assert texts & set(evil), texts  # markup tokens were generated
    page = viz.tokens_html("<script>alert('prompt')</script>", session.steps, selected_step=0)
    for bad in ("<script", "<img", 'onmouseover="'):
        assert bad not in page
    assert "&lt;script&gt;" in page


def test_no_remote_code_and_safetensors_only_from_the_hub():
    root = Path(__file__).resolve().parents[1] / "specviz"
    src = {p: p.read_text(encoding="utf-8") for p in root.rglob("*.py")}
    for path, text in src.items():
        for line in text.splitlines():
            if "trust_remote_code" in line:
                assert "trust_remote_code=False" in line, (path, line)
    models_src = "\n".join(text for path, text in src.items() if path.parent == root / "models")
    assert "use_safetensors=True, local_only=local_only" in models_src  # the hub path
    for path, text in src.items():  # nothing user-typed goes to a shell
        assert "shell=True" not in text and "os.system(" not in text, path


def test_bench_tab_requests_are_limited(models_dir, monkeypatch):
    from specviz.ui import bench_tab as bt

    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "0")
    args = dict(target="gemma-3-270m", proposers=["ngram", "draft:gemma-3-270m@int8"], ks=[1, 2, 4], source=bt.CUSTOM,
                categories=[], custom="one prompt\nanother", n_prompts=2, max_new_tokens=8, temperature=0.0,
                compare_hf=False)
    assert bt.parse_request(**args).target == "gemma-3-270m"
    for change, text in [(dict(target=models_dir["target"]), "local paths are disabled"),
                         (dict(proposers=[f"draft:{models_dir['draft']}"]), "local paths are disabled"),
                         (dict(proposers=["xdraft:../x"]), "local paths are disabled"),
                         (dict(custom="x" * 40_000), "prompt is too long")]:
        with pytest.raises(ValueError, match=text):
            bt.parse_request(**{**args, **change})
    monkeypatch.setenv("SPECVIZ_MAX_K", "2")
    with pytest.raises(ValueError, match="SPECVIZ_MAX_K"):
        bt.parse_request(**args)


def test_learn_tab_refuses_local_paths(models_dir, monkeypatch):
    from specviz.ui import learn_tab as lt

    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "0")
    html, _ = list(lt.on_model_sample(models_dir["target"], lt.DRAFT_MODEL, models_dir["draft"], "abc", "exact", 1.0,
                                      1.0, 100, 0))[-1]
    assert "local paths are disabled" in html


def test_learn_and_bench_tabs_count_prompt_tokens(models_dir, allow_local, monkeypatch):
    """The token limit is checked in tokens (not only characters) once the target's tokenizer is loaded."""
    from specviz.ui import bench_tab as bt
    from specviz.ui import learn_tab as lt

    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")  # 8 * 16 characters pass the cheap pre-check
    prefix = "the cat sat on the mat " * 2  # 46 characters, one token each with the char tokenizer
    html, fig = list(lt.on_model_sample(models_dir["target"], lt.DRAFT_MODEL, models_dir["draft"], prefix, "exact",
                                        1.0, 1.0, 100, 0))[-1]
    assert "SPECVIZ_MAX_PROMPT_TOKENS" in html
    req = bt.parse_request(target=models_dir["target"], proposers=["ngram"], ks=[2], source=bt.CUSTOM, categories=[],
                           custom="short\n" + prefix, n_prompts=2, max_new_tokens=4, temperature=0.0, compare_hf=False)
    with pytest.raises(ValueError, match=r"prompt 2: .*SPECVIZ_MAX_PROMPT_TOKENS"):
        bt._load(req, lambda _msg: None)


def test_the_sliders_stop_at_the_hosts_limits(monkeypatch):
    from specviz.core import engine
    from specviz.ui import build_demo

    assert L.ENGINE_MAX_K == engine.MAX_K
    monkeypatch.setenv("SPECVIZ_MAX_K", "33")
    with pytest.raises(ValueError, match="at most 32"):
        L.Limits.from_env()
    monkeypatch.setenv("SPECVIZ_MAX_K", "6")
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "100")
    monkeypatch.setenv("SPECVIZ_DEFAULT_MAX_NEW_TOKENS", "300")
    demo = build_demo()
    sliders = {c.elem_id: c for c in demo.blocks.values() if getattr(c, "elem_id", None) in ("sv-k", "sv-max-new",
                                                                                          "sv-bench-max-new")}
    assert sliders["sv-k"].maximum == 6 and sliders["sv-max-new"].maximum == 100
    assert sliders["sv-max-new"].value == 100 and sliders["sv-bench-max-new"].maximum == 100


def test_hub_pairs_join_the_menus_only_when_the_hub_answers(monkeypatch):
    from specviz.ui import bench_tab as bt
    from specviz.ui import playground as pg

    monkeypatch.setenv("SPECVIZ_HUB_MODELS", "0")
    assert not M.hub_reachable() and M.hub_pairs() == {}
    d = pg.Defaults.from_env()
    assert not any("/" in name for name in pg.target_choices(d))
    monkeypatch.delenv("SPECVIZ_HUB_MODELS")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: no hub, and no network call to find out
    assert not M.hub_reachable()
    monkeypatch.setenv("SPECVIZ_HUB_MODELS", "1")  # a Space: the hub answers
    targets = pg.target_choices(d)
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in targets and "Qwen/Qwen2.5-1.5B-Instruct" in targets
    assert "EleutherAI/pythia-70m" in pg.draft_choices(d)
    assert pg.auto_draft("Qwen/Qwen2.5-1.5B-Instruct", "draft", "gemma-3-270m@int8") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert pg.auto_draft("EleutherAI/pythia-410m", "draft", "my/own-draft") is None  # typed by the user: kept
    bench_targets = bt._target_choices(bt.BenchDefaults.from_env())
    assert "HuggingFaceTB/SmolLM2-1.7B-Instruct" in bench_targets
    bench_choices = bt._proposer_choices(bt.BenchDefaults.from_env(), bench_targets)
    assert "draft:HuggingFaceTB/SmolLM2-135M-Instruct" in bench_choices
    for kind in REGISTRY:  # every proposer kind is offered
        assert any(c == kind.prefix or c.startswith(kind.prefix + ":") for c in bench_choices), kind.prefix
    for target, draft in M.HUB_PAIRS.items():  # every pair passes the web UI's name check
        assert L.check_model_name(target, L.Limits()) == target and L.check_model_name(draft, L.Limits()) == draft


# -- serving with no C++ compiler ------------------------------------------------------------------

NO_COMPILER_CHILD = r"""
import logging, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
from pathlib import Path
import torch
import app  # as a Space starts it: the page built, then the kernels said once
from specviz.app import runs
from specviz.ui.state import parse_settings
from tests.support.tiny import TINY_PROMPT, make_tiny_models

print("WHY", app.native_kernels(), app.native_kernels(), flush=True)  # a second ask says nothing more
target, draft = make_tiny_models(Path(sys.argv[1]))
settings = parse_settings(target, "ngram", draft, 3, 0.0, 1.0, 0, 0, 16, TINY_PROMPT, True)  # one model's runners
for target_only in (False, True):
    decoder = runs.build_decoder(settings, lambda _msg: None, target_only=target_only)
    print("TOKENS", list(decoder.generate(settings.prompt, max_new_tokens=16, seed=0, chat=True).token_ids), flush=True)
"""


def test_the_app_serves_and_decodes_with_no_compiler_on_path(tmp_path):
    """No C++ compiler (PATH holds only the Python's own directory; CC and CXX unset) and a fresh
    cache: the app starts, says once that PyTorch's kernels serve, tries the fused runner by name
    (``SPECVIZ_STATIC_DECODE=fused``), which cannot serve there, failing in one log line, without a
    hang or a traceback, and decodes greedily what target-only decodes."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECVIZ_", "CC", "CXX", "TORCHINDUCTOR_"))}
    env.update(PATH=os.path.dirname(sys.executable), PYTHONPATH=str(root), SPECVIZ_CACHE_DIR=str(tmp_path / "cache"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), SPECVIZ_STATIC_DECODE="fused",
               SPECVIZ_ALLOW_LOCAL_PATHS="1", SPECVIZ_HUB_MODELS="0", HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
    run = subprocess.run([sys.executable, "-c", NO_COMPILER_CHILD, str(tmp_path / "models")], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    out, log = run.stdout, run.stderr
    assert run.returncode == 0, out[-2000:] + log[-4000:]
    why = next(line for line in out.splitlines() if line.startswith("WHY"))
    assert why.count("no C++ compiler on PATH") == 2, why
    assert log.count("PyTorch's kernels serve") == 1 and "no C++ compiler on PATH" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "no fused static decode step" in log, log[-3000:]
    spec, target_only = (line for line in out.splitlines() if line.startswith("TOKENS"))
    assert spec == target_only
    assert not (tmp_path / "cache" / "kernels").exists() or not any((tmp_path / "cache" / "kernels").iterdir())


def test_a_server_slow_to_answer_gradios_first_check_still_serves(monkeypatch):
    """Gradio asks a new server once with a 3 s timeout and raises when it is slow; on a busy machine
    (a Space's cold start, CI) specviz.ui.launch asks longer and serves (the case is forced here)."""
    import gradio as gr
    import httpx
    from gradio import networking

    from specviz.ui import launch
    from tests.support.app_server import free_port

    monkeypatch.setattr(networking, "url_ok", lambda url: False)
    with gr.Blocks() as demo:
        gr.Markdown("up")
    try:
        _, url, share = launch(demo, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
        assert share is None and httpx.get(url, timeout=30).status_code == 200
    finally:
        demo.close()
