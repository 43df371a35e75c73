"""Safe to host: bad inputs through the playground's handlers (no browser), the hosting limits,
the model cache's memory budget, and HTML escaping of token text.

Each bad input must give an error message in the page, let no exception escape, leave the
session as it was, and the next normal Step must work.
"""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import app_server  # noqa: E402
from conftest import make_bpe_tokenizer, make_llama  # noqa: E402

from specviz import limits as L  # noqa: E402
from specviz import models as M  # noqa: E402
from specviz.proposers import REGISTRY  # noqa: E402


# -- fixtures ----------------------------------------------------------------------------------


def _char_tokenizer(chars: str):
    """Like conftest.make_char_tokenizer, over another character set (another vocabulary size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *chars])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hosting-models")
    target, draft = app_server.make_tiny_models(root)
    bpe = make_bpe_tokenizer()
    for name, tok in (("bpe-draft", bpe), ("small-vocab-draft", _char_tokenizer("abcdefghij .,"))):
        make_llama(len(tok), 32, 2, seed=5, sharpen=30.0).save_pretrained(str(root / name))
        tok.save_pretrained(str(root / name))
    return {"target": target, "draft": draft, "bpe": str(root / "bpe-draft"), "small": str(root / "small-vocab-draft")}


@pytest.fixture
def allow_local(monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_K", "SPECVIZ_MODEL_MEMORY_GB"):
        monkeypatch.delenv(var, raising=False)


def _raw(m, **change):
    from specviz.ui.state import DRAFT

    args = dict(target=m["target"], proposer=DRAFT, draft=m["draft"], k=4, temperature=1.0, top_p=1.0, top_k=0,
                seed=0, max_new_tokens=12, prompt=app_server.TINY_PROMPT, chat=True, schedule="constant", layers=1)
    args.update(change)
    return tuple(args.values())


# -- the table of bad inputs (README: "Safe to host") ------------------------------------------

NAN = float("nan")

# (case id, changes to the good settings, extra environment, text the message must contain)
BAD_INPUTS = [
    ("unknown hub model", dict(target="no-such-owner/no-such-model-xyz"), {}, "no-such-owner/no-such-model-xyz"),
    ("unknown model name", dict(target="not a model!"), {}, "unknown model"),
    ("local path, not allowed", {}, {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("relative path ..", dict(target="../../etc/passwd"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("home path ~", dict(target="~/models/x"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("hub id with ..", dict(target="owner/../x"), {"SPECVIZ_ALLOW_LOCAL_PATHS": "0"}, "local paths are disabled"),
    ("mismatched tokenizers", dict(draft="@bpe"), {}, "does not share the target"),
    ("vocabularies of different sizes", dict(draft="@small"), {}, "17 vs 37 tokens"),
    ("empty prompt", dict(prompt="   "), {}, "prompt is empty"),
    ("100,000-character prompt", dict(prompt="the cat sat. " * 7693), {}, "prompt is too long"),
    ("prompt over the token limit", dict(prompt=app_server.TINY_PROMPT + " the end"), {"SPECVIZ_MAX_PROMPT_TOKENS": "20"},
     "SPECVIZ_MAX_PROMPT_TOKENS"),
    ("k = 0", dict(k=0), {}, "from 1 to 16"),
    ("k = 100", dict(k=100), {}, "from 1 to 16"),
    ("k over SPECVIZ_MAX_K", dict(k=8), {"SPECVIZ_MAX_K": "6"}, "SPECVIZ_MAX_K"),
    ("temperature -1", dict(temperature=-1), {}, "temperature must be from 0"),
    ("temperature NaN", dict(temperature=NAN), {}, "temperature must be a finite number"),
    ("top-p 0", dict(top_p=0), {}, "top-p must be in (0, 1]"),
    ("top-p 1.5", dict(top_p=1.5), {}, "top-p must be in (0, 1]"),
    ("max new tokens 1,000,000", dict(max_new_tokens=1_000_000), {}, "max new tokens must be from 1 to"),
    ("max new tokens over SPECVIZ_MAX_NEW_TOKENS", dict(max_new_tokens=600), {}, "SPECVIZ_MAX_NEW_TOKENS"),
]


@pytest.fixture(scope="module")
def running(models_dir):
    """A playground session with one step done (the state every bad input must leave alone)."""
    import os

    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    saved = os.environ.get("SPECVIZ_ALLOW_LOCAL_PATHS")
    os.environ["SPECVIZ_ALLOW_LOCAL_PATHS"] = "1"
    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    assert len(st.steps) == 1, st.message
    yield st
    st.close()
    if saved is None:
        os.environ.pop("SPECVIZ_ALLOW_LOCAL_PATHS", None)
    else:
        os.environ["SPECVIZ_ALLOW_LOCAL_PATHS"] = saved


@pytest.mark.parametrize("case,change,env,text", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_a_message_and_the_session_survives(running, models_dir, allow_local, monkeypatch, case, change,
                                                         env, text):
    from specviz.ui import playground as pg

    st = running
    change = {k: (models_dir[v[1:]] if isinstance(v, str) and v.startswith("@") else v) for k, v in change.items()}
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    before = (len(st.steps), st.settings, st.session)
    handlers = (pg.on_step, pg.on_play) if "draft" in change else (pg.on_step, pg.on_play, pg.on_baseline)
    for handler in handlers:  # (the target-only baseline does not load the draft)
        frames = list(handler(st, *_raw(models_dir, **change)))  # nothing escapes
        assert st.message[1] == "error" and text in st.message[0], (handler.__name__, st.message)
        assert "sv-msg-error" in frames[-1][0] and "Traceback" not in frames[-1][0]
        assert (len(st.steps), st.settings, st.session) == before
    for var in env:
        monkeypatch.delenv(var)
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_PATHS", "1")
    list(pg.on_step(st, *_raw(models_dir)))  # the same run goes on
    assert st.message[1] != "error", st.message
    assert len(st.steps) == before[0] + 1 or st.session.done


def test_reset_mid_run_stops_play_quietly(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    gen = pg.on_play(st, *_raw(models_dir, max_new_tokens=40))
    next(gen)  # "Loading…"
    while not st.steps:
        next(gen)
    pg.on_reset(st)
    rest = list(gen)  # the old Play ends without touching the fresh state
    assert rest == [] or st.steps == []
    assert st.steps == [] and st.session is None and st.message[1] == "info"
    list(pg.on_step(st, *_raw(models_dir)))
    assert len(st.steps) == 1 and st.message[1] != "error"
    st.close()


def test_an_exception_inside_a_step_is_reported_and_the_next_step_works(models_dir, allow_local, monkeypatch):
    from specviz.engine import Session
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    real, calls = Session.step, []

    def flaky(self):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom inside the engine")
        return real(self)

    monkeypatch.setattr(Session, "step", flaky)
    frames = list(pg.on_step(st, *_raw(models_dir)))
    assert st.message[1] == "error" and "boom inside the engine" in st.message[0] and "Reset" in st.message[0]
    assert "Traceback" not in frames[-1][0] and len(st.steps) == 1
    list(pg.on_step(st, *_raw(models_dir)))
    assert st.message[1] != "error" and len(st.steps) == 2
    st.close()


def test_different_output_sizes_with_the_same_tokenizer_run(models_dir, allow_local, tmp_path):
    """A draft whose LM head is padded (more logits than tokens) is fine: it shares the tokenizer."""
    from conftest import make_char_tokenizer

    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    tok = make_char_tokenizer()
    make_llama(len(tok) + 11, 32, 2, seed=6, sharpen=30.0).save_pretrained(str(tmp_path / "padded"))
    tok.save_pretrained(str(tmp_path / "padded"))
    st = PlaygroundState()
    list(pg.on_play(st, *_raw(models_dir, draft=str(tmp_path / "padded"), max_new_tokens=8)))
    assert st.message[1] == "ok" and st.session.done, st.message
    st.close()


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
    from specviz.engine import SpeculativeDecoder
    from specviz.proposers import NGram
    from specviz.records import Sampling

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


def test_a_live_run_pins_its_models_until_reset(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState

    st = PlaygroundState()
    list(pg.on_step(st, *_raw(models_dir)))
    target, draft = st.session.decoder.target, st.session.decoder.proposer.model
    assert M._pins.get(id(target), 0) >= 1 and M._pins.get(id(draft), 0) >= 1
    before = dict(M._pins)
    pg.on_reset(st)
    assert M._pins.get(id(target), 0) == before[id(target)] - 1
    list(pg.on_step(st, *_raw(models_dir)))
    st.close()
    assert M._pins.get(id(target), 0) == before[id(target)] - 1


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
    from specviz import engine
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
    assert pg.auto_draft("Qwen/Qwen2.5-1.5B-Instruct", pg.DRAFT, "gemma-3-270m@int8") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert pg.auto_draft("EleutherAI/pythia-410m", pg.DRAFT, "my/own-draft") is None  # typed by the user: kept
    bench_targets = bt._target_choices(bt.BenchDefaults.from_env())
    assert "HuggingFaceTB/SmolLM2-1.7B-Instruct" in bench_targets
    bench_choices = bt._proposer_choices(bt.BenchDefaults.from_env(), bench_targets)
    assert "draft:HuggingFaceTB/SmolLM2-135M-Instruct" in bench_choices
    for kind in REGISTRY:  # every proposer kind is offered
        assert any(c == kind.prefix or c.startswith(kind.prefix + ":") for c in bench_choices), kind.prefix
    for target, draft in M.HUB_PAIRS.items():  # every pair passes the web UI's name check
        assert L.check_model_name(target, L.Limits()) == target and L.check_model_name(draft, L.Limits()) == draft


def test_the_playground_offers_typical_acceptance_labelled_lossy(models_dir, allow_local):
    """Typical acceptance in the playground: recorded per step (rule and threshold), shown as LOSSY
    in the status, the tooltips and the draft table, and kept in the trace."""
    from specviz.hooks import load_trace
    from specviz.ui import playground as pg
    from specviz.ui.state import PlaygroundState, parse_settings
    from specviz.viz import tokens as vt

    st = PlaygroundState()
    frames = list(pg.on_play(st, *_raw(models_dir, max_new_tokens=16, acceptance="typical (LOSSY)")))
    assert st.settings.acceptance == "typical" and "LOSSY" in st.settings.describe()
    judged = [d for s in st.steps for d in s.drafts if d.verdict != "discarded"]
    assert judged and all(s.rule == "typical" for s in st.steps)
    assert all(d.threshold is not None and d.u is None and d.accepted == (d.p > d.threshold) for d in judged)
    tip = vt.tokens_html(st.prompt_text, st.steps)
    assert "typical (LOSSY)" in tip and "greedy:" not in tip
    assert "LOSSY" in vt.step_summary_text(st.steps[-1])
    assert any(row[5].startswith("p>") for row in vt.draft_table_rows(st.steps[0])[:-1])
    assert frames and "Traceback" not in frames[-1][0]
    back = load_trace(st.trace_path).steps  # the run's own trace (the download)
    assert [s.rule for s in back] == [s.rule for s in st.steps] and back[0].drafts == st.steps[0].drafts
    st.close()
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        parse_settings(*_raw(models_dir, acceptance="fast"))


def test_the_playground_runs_the_ngram_or_draft_proposer(models_dir, allow_local):
    from specviz.ui import playground as pg
    from specviz.ui.state import HYBRID, PlaygroundState
    from specviz.viz import tokens as vt

    st = PlaygroundState()
    list(pg.on_play(st, *_raw(models_dir, proposer=HYBRID, temperature=0.0, max_new_tokens=30)))
    assert st.message[1] == "ok", st.message
    sources = {s.info.get("source") for s in st.steps if s.k}
    assert "ngram" in sources, sources  # the tiny prompt repeats itself
    assert any("drafted by" in vt.step_summary(s) for s in st.steps)
    st.close()
