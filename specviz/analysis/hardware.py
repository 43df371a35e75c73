"""The physical limit of decoding on this machine, and the verify pass's cost curve.

A decode step of a memory-bound model reads every weight once, so it cannot run faster than
(bytes of weights read per token) / (memory bandwidth): the roofline limit. :func:`bandwidth`
measures the bandwidth once per process (the faster of two large float32 reads), :func:`decode_bytes` counts the
bytes a decode step reads (input embedding: only the row used; LM head: all of it; tied weights
once; the KV cache optionally), :func:`roofline` combines them and :func:`limit_fraction` says
how close a run came: target-only tokens/s over the limit, and for speculative decoding both its
tokens/s over the limit (above 1 is what speculation buys) and its target forwards/s over the
limit (how close each forward ran to the bound).

:func:`verify_costs` measures t(n), the time of one forward of n new positions on top of a KV
cache of a realistic prompt, and v(n) = t(n) / t(1): the cost of verifying k = n - 1 drafts
(Leviathan et al. assume v(n) = 1; on a CPU it is not). :func:`compute_rates` measures why: the
products' rate at n rows with the weight in cache (a small-row GEMM runs far below the CPU's peak),
and :func:`verify_floor` combines it with the bandwidth into the least a verify pass of n positions
can cost here, max(bytes / bandwidth, 2 x weights x n / rate(n)).

    python -m specviz.analysis.hardware            # bandwidth and the limit for each built-in model
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

PRECISION_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float  # median read bandwidth of the faster read
    threads: int  # torch.get_num_threads() when measured
    size_bytes: int  # the tensor read
    read: str = "sum"  # the faster read: "sum" (a reduction) or "x @ M" (one row through a [k, n] matrix)

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


_measured: dict[tuple[int, int], Bandwidth] = {}


def bandwidth(size_bytes: int = 1 << 30, repeats: int = 5, *, refresh: bool = False) -> Bandwidth:
    """This machine's memory read bandwidth with the current torch thread count: the faster of two
    reads of one float32 tensor of ``size_bytes``, each the median over ``repeats``: a sum, and one
    row times it viewed as a [1024, n] matrix (``x @ M``, how a decode step's one-row products
    stream their weights). A sum alone under-reads on some CPUs: on an AMX Xeon host (2 threads)
    19.8 GB/s against 25.8-27.6 for one-row products through large matrices, which would let a
    decode step seem nearer its limit than it is. Measured once per (size, threads) per process;
    ``refresh=True`` measures again."""
    if size_bytes < 1 << 20 or repeats < 1:
        raise ValueError(f"measure at least 1 MiB, at least once (got {size_bytes} bytes, {repeats} repeats)")
    key = (size_bytes, torch.get_num_threads())
    if not refresh and key in _measured:
        return _measured[key]
    k = 1024
    n = size_bytes // 4 // k
    x = torch.ones(k * n, dtype=torch.float32)  # [k n]; ones: pages really allocated
    row = torch.ones(1, k)  # [1, k]
    reads = {"sum": x.sum, "x @ M": functools.partial(torch.matmul, row, x.view(k, n))}  # [] and [1, n]
    medians = {}
    with torch.inference_mode():
        for name, read in reads.items():
            read()  # warm
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                read()
                times.append(time.perf_counter() - t)
            medians[name] = statistics.median(times)
    del x, reads
    fastest = min(medians, key=medians.get)
    result = Bandwidth(bytes_per_s=k * n * 4 / medians[fastest], threads=key[1], size_bytes=size_bytes, read=fastest)
    _measured[key] = result
    return result


def _element_bytes(t: torch.Tensor, precision: str | None) -> int:
    if precision is not None and t.is_floating_point():
        return PRECISION_BYTES[precision]
    return t.element_size()


def decode_bytes(model: torch.nn.Module, precision: str | None = None, kv_positions: int = 0) -> int:
    """Bytes of weights one decode step of ``model`` reads: every parameter and buffer once (tied
    ones once), packed int8 Linear weights (1 byte each plus a float scale per row), but of the
    input embedding only one row; plus, with ``kv_positions`` > 0, the KV cache of that many
    positions (float32, or 2 bytes for 16-bit precisions).

    ``precision`` (``"float32"``, ``"bfloat16"``, ``"float16"``, ``"int8"``) counts the model as
    if stored that way: ``"int8"`` means int8 ``nn.Linear`` weights (LM head included) with
    everything else float32, as ``@int8`` builds it."""
    if precision is not None and precision not in PRECISION_BYTES:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(PRECISION_BYTES)} or None")
    if kv_positions < 0:
        raise ValueError(f"kv_positions must be >= 0, not {kv_positions}")
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    embed_weight = getattr(embed, "weight", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    head_weight = head_weight if isinstance(head_weight, torch.Tensor) else None
    seen: set[int] = set()  # tied tensors count once (a tied head: in full, the gather is negligible)
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    if head_weight is not None:
        linear_weights.add(id(head_weight))
    total = 0
    from ..runtime.kernels import COPIES, PlannedLinear

    copies = {id(c) for m in model.modules() if isinstance(m, PlannedLinear) for c in (getattr(m, n) for n in COPIES)
              if isinstance(c, torch.Tensor)}
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in seen or t.is_mkldnn or id(t) in copies:  # a planned layer's copy (runtime.kernels) stands for its weight
            continue
        seen.add(id(t))
        if embed_weight is not None and t is embed_weight and (head_weight is None or head_weight is not t):
            total += t.shape[-1] * _element_bytes(t, None if precision == "int8" else precision)  # one row
            continue
        if precision == "int8" and id(t) in linear_weights:
            total += t.numel() + 4 * t.shape[0]  # int8 weight, one float scale per output row
        else:
            total += t.numel() * _element_bytes(t, None if precision == "int8" else precision)
    if kv_positions:
        total += kv_positions * kv_bytes_per_position(model, precision)
    return int(total)


def kv_bytes_per_position(model: torch.nn.Module, precision: str | None = None) -> int:
    """Bytes of keys and values one cached position holds across all layers."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    per = 2 if precision in ("bfloat16", "float16") else 4
    return int(2 * cfg.num_hidden_layers * heads * head_dim * per)


@dataclass(frozen=True)
class Roofline:
    bytes_per_token: int  # weights (and KV) read per decode step
    bytes_per_s: float  # memory bandwidth
    tokens_per_s: float  # the limit: one decode step per bytes_per_token / bytes_per_s

    @property
    def ms_per_token(self) -> float:
        return 1e3 / self.tokens_per_s


def roofline(bytes_per_token: int, bytes_per_s: float) -> Roofline:
    """The decode limit: bytes_per_s / bytes_per_token tokens per second."""
    if bytes_per_token <= 0 or bytes_per_s <= 0:
        raise ValueError(f"bytes per token and bandwidth must be positive (got {bytes_per_token}, {bytes_per_s})")
    return Roofline(bytes_per_token, bytes_per_s, bytes_per_s / bytes_per_token)


@dataclass(frozen=True)
class LimitFraction:
    tokens_fraction: float  # (tokens/s) / limit: <= 1 for plain decoding; speculation can pass 1
    forwards_fraction: float  # (target forwards/s) / limit: how near each forward ran to the bound
    tokens_per_forward: float  # new tokens per target forward


def limit_fraction(tokens_per_s: float, new_tokens: int, target_forwards: int, limit_tokens_per_s: float) -> LimitFraction:
    """A run's distance from the roofline. Target-only runs do one forward per token, so both
    fractions agree; a speculative run's tokens_fraction exceeds its forwards_fraction by its
    tokens per target forward."""
    if tokens_per_s < 0 or new_tokens < 0 or target_forwards < 0 or limit_tokens_per_s <= 0:
        raise ValueError("tokens/s, tokens and forwards must be >= 0 and the limit > 0")
    if target_forwards == 0:
        if new_tokens:
            raise ValueError(f"{new_tokens} tokens need at least one target forward")
        return LimitFraction(0.0, 0.0, 0.0)
    per_forward = new_tokens / target_forwards
    forwards_per_s = tokens_per_s / per_forward if per_forward else 0.0
    return LimitFraction(tokens_per_s / limit_tokens_per_s, forwards_per_s / limit_tokens_per_s, per_forward)


def roofline_lines(rows: list[dict], model: torch.nn.Module, precision: str | None = None,
                   probes_gb_s: Sequence[float] = ()) -> list[str]:
    """The physical limit beside a benchmark's rows (specviz's own target-only and its fastest
    speculative configuration): tokens/s as a fraction of bandwidth / bytes read per decode step,
    and, for the speculative row, its target forwards/s as a fraction (each forward reads the
    weights once, so a speculative run may pass 1.0 in tokens but not in forwards). Then, for
    target-only, its decode steps alone (a run's tokens/s counts its prefills too), and for a float32
    target the floor of the speculative row's v at its width (:func:`verify_floor`).

    The bandwidth is the median of ``probes_gb_s``, reads taken beside target-only's runs (the
    sweep's ``probe_bandwidth``), where there are some: on a shared host one read can be far from
    the minutes a benchmark ran in (24-41 GB/s a second apart on a 2-vCPU Zen 4 EPYC). Else one
    read of this process (:func:`bandwidth`)."""
    if probes_gb_s:  # no read of its own: the 1 GiB one would only stand beside them
        bw = Bandwidth(bytes_per_s=statistics.median(probes_gb_s) * 1e9, threads=torch.get_num_threads(),
                       size_bytes=1 << 28, read=f"the median of {len(probes_gb_s)} reads beside target-only's runs, "
                                                f"which ranged {min(probes_gb_s):.1f}-{max(probes_gb_s):.1f} GB/s")
    else:
        bw = bandwidth()
    limit = roofline(decode_bytes(model, precision), bw.bytes_per_s)
    ours = [r for r in rows if r.get("impl") == "specviz" and r.get("steps")]
    base = [r for r in ours if r.get("proposer") == "target-only"]
    spec = [r for r in ours if r.get("proposer") != "target-only"]
    fp32 = precision in (None, "float32") and next(model.parameters()).dtype == torch.float32  # rates are float32's
    how = bw.read if probes_gb_s else f"read by {bw.read}"
    lines = [f"Physical limit: {bw.gb_per_s:.1f} GB/s read bandwidth ({bw.threads} threads, {how}) / "
             f"{limit.bytes_per_token / 1e6:.0f} MB of weights per decode step = {limit.tokens_per_s:.1f} tokens/s"]
    for label, row in (("target-only", base[0] if base else None),
                       ("best speculative", max(spec, key=lambda r: r["tokens_per_s"]) if spec else None)):
        if row is None:
            continue
        f = limit_fraction(row["tokens_per_s"], row["new_tokens"], row["steps"], limit.tokens_per_s)
        name = "" if label == "target-only" else f" ({row['proposer']}, k={row['k']})"
        lines.append(f"  {label}{name}: {row['tokens_per_s']:.2f} tokens/s = {f.tokens_fraction:.2f} of the limit; "
                     f"{f.tokens_per_forward:.2f} tokens per target forward, forwards at {f.forwards_fraction:.2f} of it")
        if label == "target-only" and row.get("step_ms"):
            steps = 1e3 / row["step_ms"]  # decode steps per second, prefill left out
            lines.append(f"    its decode steps alone (prefill left out): {row['step_ms']:.1f} ms each, "
                         f"{steps:.2f} per second = {steps / limit.tokens_per_s:.2f} of the limit")
            read = screened_bytes(model, limit.bytes_per_token)
            if read is not None:  # the float32 limit counts a head these steps never read in full
                own = roofline(read, bw.bytes_per_s)
                from ..runtime.argmax_head import screen_of

                kind = screen_of(model, 1).kind  # there is one: it read fewer bytes
                lines.append(f"    greedy steps read the LM head's {kind} screen in place of its float32 weight: "
                             f"{read / 1e6:.0f} MB a step, a limit of {own.tokens_per_s:.1f} tokens/s; "
                             f"these steps at {steps / own.tokens_per_s:.2f} of it")
        elif label != "target-only" and fp32:
            step_ms = base[0].get("step_ms") if base else None
            lines.append(_floor_line(row, model, bw.bytes_per_s, step_ms / 1e3 if step_ms else None))
    return lines


def screened_bytes(model: torch.nn.Module, counted: int) -> int | None:
    """Bytes a greedy one-row step of ``model`` reads where its argmax head screens one row
    (:mod:`specviz.runtime.argmax_head`): ``counted`` (:func:`decode_bytes`) with the float32 head
    replaced by its bf16 or int8 screen and the few rows recomputed; None where no screen runs at one row."""
    from ..runtime.argmax_head import screen_of

    screen = screen_of(model, 1)  # the screen a one-row step reads, if any
    if screen is None:
        return None
    return int(counted - screen.weight.numel() * screen.weight.element_size() + screen.blocked.numel() * screen.blocked.element_size())


def _positions(row: dict) -> int:
    """Positions one verify pass of a benchmark row scores: k + 1 for a chain, the mean nodes
    per step + 1 (rounded) for a tree."""
    nodes = row.get("nodes_per_step") if row.get("tree") else None
    return max(1, round(nodes) + 1) if nodes else int(row["k"]) + 1


def _floor_line(row: dict, model: torch.nn.Module, bytes_per_s: float, t1_s: float | None = None) -> str:
    """Why the best row's verify pass costs what it does: the floor of t(n) at its width, and of
    v(n) = t(n) / t(1) against the run's measured one-token step ``t1_s`` (target-only's decode
    steps; else against the floor of t(1), which a step far from its own floor makes far too high)."""
    n = _positions(row)
    floors = verify_floors(model, (n,), bytes_per_s)
    one, wide = floors[1], floors[n]
    measured = f"; measured v = {row['v']:.2f}" if isinstance(row.get("v"), (int, float)) else ""
    if t1_s:
        unit = (f"against this run's one-token step ({t1_s * 1e3:.0f} ms; its own floor {one.seconds * 1e3:.0f} ms) "
                f"v({n}) >= {wide.seconds / t1_s:.2f} where reading and products overlap, "
                f"{wide.serial_s / max(t1_s, one.serial_s):.2f} where they run one after the other")
    else:
        unit = (f"so v({n}) >= {wide.seconds / one.seconds:.2f} where reading and products overlap, "
                f"{wide.serial_s / one.serial_s:.2f} where they run one after the other (both against the floor of t(1))")
    return (f"    its verify pass of {n} positions: at least {wide.seconds * 1e3:.0f} ms here, {wide.bound}-bound "
            f"(weights read once {wide.memory_s * 1e3:.0f} ms; products {wide.compute_s * 1e3:.0f} ms at the "
            f"{wide.rate / 1e9:.0f} GFLOP/s this CPU's BLAS reaches on {n} rows in cache, against {one.rate / 1e9:.0f} on 1); "
            f"{unit}{measured}")


@dataclass(frozen=True)
class ComputeRate:
    flops_per_s: dict[int, float]  # rows -> multiply-adds x 2 per second, the weight in cache
    threads: int  # torch.get_num_threads() when measured
    shapes: tuple[tuple[int, int], ...]  # the weights timed, [out, in] each

    def at(self, rows: int) -> float:
        """The rate at ``rows`` (the nearest measured row count at or above it, else the widest)."""
        above = [r for r in self.flops_per_s if r >= rows]
        return self.flops_per_s[min(above) if above else max(self.flops_per_s)]


_rates: dict[tuple, ComputeRate] = {}
RATE_SHAPE = (1024, 512)  # [out, in] float32: 2 MiB, in cache on the CPUs measured, so the products, not memory, set the time
CACHED_BYTES = 2 << 20  # a model's shape is timed on at most this many bytes of its rows


def linear_shapes(model: torch.nn.Module) -> dict[tuple[int, int], int]:
    """[out, in] -> how many of the model's product weights have it (each ``nn.Linear`` and the
    LM head once), the shapes :func:`compute_rates` times for that model."""
    shapes: dict[tuple[int, int], int] = {}
    for w in _product_weights(model):
        shape = (int(w.shape[0]), int(w.shape[1]))
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


def compute_rates(rows: Sequence[int] = tuple(range(1, 18)), repeats: int = 5, *, shapes: dict[tuple[int, int], int] | None = None,
                  refresh: bool = False, clock: Callable[[], float] = time.perf_counter) -> ComputeRate:
    """How fast float32 products of ``rows`` rows run here once the weight is in cache: for each
    row count and each [out, in] of ``shapes`` (a model's, :func:`linear_shapes`, with their counts;
    default one 2 MiB probe, :data:`RATE_SHAPE`), its first rows up to :data:`CACHED_BYTES` timed
    through the faster of ``F.linear`` and a K-major copy (``x @ W^T``), the median of ``repeats``
    timings of 20 calls; the rate is all the shapes' flops over their summed times, scaled to their
    full rows and counts. A decode step's one-row products are bound by memory; a verify pass of n
    rows does n times the arithmetic on the same bytes, and a BLAS reaches its peak only from some
    rows on (on an AMX Xeon, 2 threads, the probe: 25-45 GFLOP/s at one row, 90-190 at nine).
    Measured once per (rows, shapes, threads) per process."""
    rows = tuple(sorted({int(r) for r in rows}))
    if not rows or rows[0] < 1 or repeats < 1:
        raise ValueError(f"rows must be whole numbers >= 1 and repeats >= 1 (got {list(rows)}, {repeats})")
    shapes = dict(shapes or {RATE_SHAPE: 1})
    key = (rows, tuple(sorted(shapes.items())), torch.get_num_threads())
    if not refresh and key in _rates:
        return _rates[key]
    gen = torch.Generator().manual_seed(0)
    calls, flops, seconds = 20, dict.fromkeys(rows, 0.0), dict.fromkeys(rows, 0.0)
    with torch.inference_mode():
        for (out_f, in_f), count in shapes.items():
            kept = max(1, min(out_f, CACHED_BYTES // (4 * in_f)))  # rows of the weight that stay in cache
            weight = torch.randn(kept, in_f, generator=gen)  # [kept, in]
            kmajor = weight.t().contiguous()  # [in, kept]
            for r in rows:
                x = torch.randn(r, in_f, generator=gen)  # [r, in]
                best = float("inf")
                for fn in (functools.partial(torch.nn.functional.linear, x, weight), functools.partial(torch.matmul, x, kmajor)):
                    fn()  # warm (and the weight into cache)
                    times = []
                    for _ in range(repeats):
                        t = clock()
                        for _ in range(calls):
                            fn()
                        times.append((clock() - t) / calls)
                    best = min(best, statistics.median(times))
                flops[r] += 2.0 * r * out_f * in_f * count
                seconds[r] += max(best, 1e-12) * (out_f / kept) * count
    result = ComputeRate({r: flops[r] / seconds[r] for r in rows}, key[2], tuple(shapes))
    _rates[key] = result
    return result


def _product_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every ``nn.Linear`` weight and the LM head's, each tensor once."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights += [head.weight] if isinstance(getattr(head, "weight", None), torch.Tensor) else []
    seen: set[int] = set()
    return [w for w in weights if isinstance(w, torch.Tensor) and w.dim() == 2 and not (id(w) in seen or seen.add(id(w)))]


def matmul_weights(model: torch.nn.Module) -> int:
    """Weights each position multiplies once in a forward: every ``nn.Linear``'s (and an untied or
    tied LM head's) elements, counted once; the input embedding is a lookup, not a product."""
    return sum(w.numel() for w in _product_weights(model))


@dataclass(frozen=True)
class VerifyFloor:
    n: int  # positions scored in one pass
    memory_s: float  # every weight read once at the measured bandwidth
    compute_s: float  # 2 x weights x n flops at the rate measured for n rows
    rate: float  # that rate, flops per second

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def serial_s(self) -> float:
        """The reading and the products one after the other, not overlapped (what a kernel that
        stalls on memory while it multiplies costs)."""
        return self.memory_s + self.compute_s


def verify_floor(bytes_per_pass: int, weights: int, n: int, bytes_per_s: float, rates: ComputeRate) -> VerifyFloor:
    """The least one forward of n positions can cost here: its weights read once, its products at
    the rate this machine's BLAS reaches at n rows (pure arithmetic on measured inputs). The
    floor of v(n) is ``verify_floor(n).seconds / verify_floor(1).seconds``."""
    if bytes_per_pass <= 0 or weights <= 0 or n < 1 or bytes_per_s <= 0:
        raise ValueError(f"bytes, weights, n and bandwidth must be positive (got {bytes_per_pass}, {weights}, {n}, {bytes_per_s})")
    rate = rates.at(n)
    return VerifyFloor(n, bytes_per_pass / bytes_per_s, 2.0 * weights * n / rate, rate)


def verify_floors(model: torch.nn.Module, ns: Sequence[int], bytes_per_s: float | None = None) -> dict[int, VerifyFloor]:
    """n -> :func:`verify_floor` of a float32 ``model`` for each n of ``ns`` and n = 1 (the unit
    of v): its bytes per decode step, its product weights, the rates on its own shapes
    (:func:`compute_rates`) and ``bytes_per_s`` (default: :func:`bandwidth`)."""
    ns = tuple(sorted({int(n) for n in ns} | {1}))
    rates = compute_rates(rows=ns, shapes=linear_shapes(model))
    bw = bandwidth().bytes_per_s if bytes_per_s is None else bytes_per_s
    nbytes, weights = decode_bytes(model), matmul_weights(model)
    return {n: verify_floor(nbytes, weights, n, bw, rates) for n in ns}


@dataclass(frozen=True)
class VerifyCosts:
    context: int  # cached positions each forward ran on top of
    seconds: dict[int, float]  # n -> median t(n)

    @property
    def v(self) -> dict[int, float]:
        """n -> t(n) / t(1)."""
        return {n: t / self.seconds[1] for n, t in self.seconds.items()}


@torch.inference_mode()
def verify_costs(
    model: torch.nn.Module, context: int = 256, max_n: int = 17, repeats: int = 5, seed: int = 0, stat: str = "median",
    warmup: int = 1,
) -> VerifyCosts:
    """t(n) for n = 1..max_n: one forward of n new tokens (logits of all n, as a verify pass
    keeps) on top of a KV cache of ``context`` positions, rolled back after each; the n are
    interleaved within each repeat so a busy machine disturbs them alike. ``stat``: ``"median"``
    of ``repeats``, or ``"min"`` (the better estimate of the quiet cost on a shared machine).
    The cache is the one a session's target gets (``kv.session_cache``: the static step where the
    model has one), so t(n) is what specviz's verify pass costs."""
    from ..runtime.kv import forward_logits, rollback, session_cache, vocab_size

    if stat not in ("median", "min"):
        raise ValueError(f"stat must be 'median' or 'min', not {stat!r}")
    if context < 1 or max_n < 1 or repeats < 1:
        raise ValueError(f"context, max_n and repeats must be >= 1 (got {context}, {max_n}, {repeats})")
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    vocab = min(vocab_size(model), 32_000)
    prompt = torch.randint(3, vocab, (context,), generator=gen).to(device)  # [context]
    new = torch.randint(3, vocab, (max_n,), generator=gen).to(device)  # [max_n]
    cache = session_cache(model)
    forward_logits(model, prompt, cache, 1)
    rollback(cache, context)
    for _ in range(warmup):  # warm every shape (the widest first)
        for n in range(max_n, 0, -1):
            forward_logits(model, new[:n], cache, n)
            rollback(cache, context)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[int, list[float]] = {n: [] for n in range(1, max_n + 1)}
    for _ in range(repeats):
        for n in range(1, max_n + 1):
            sync()
            t = time.perf_counter()
            forward_logits(model, new[:n], cache, n)  # [n, V]: every position scored, as in a verify
            sync()
            times[n].append(time.perf_counter() - t)
            rollback(cache, context)
    pick = statistics.median if stat == "median" else min
    return VerifyCosts(context, {n: pick(v) for n, v in times.items()})


def _main() -> None:
    from .. import settings
    from ..models import list_models, load_model

    torch.set_num_threads(int(settings.value("SPECVIZ_THREADS", "2")))
    bw = bandwidth()
    print(f"memory read bandwidth: {bw.gb_per_s:.1f} GB/s ({bw.threads} threads, {bw.size_bytes >> 20} MiB float32, read by {bw.read})")
    rates = compute_rates()
    print(f"float32 products with the weight in cache ({rates.threads} threads), GFLOP/s by rows: "
          + ", ".join(f"{r}: {rates.flops_per_s[r] / 1e9:.0f}" for r in (1, 2, 3, 5, 9, 17)))
    floors: list[tuple[str, torch.nn.Module]] = []
    print(f"{'model':<16} {'precision':<9} {'MB/token':>9} {'limit tok/s':>11} {'ms/token':>9}")
    for info in list_models():
        if not info["available"]:
            continue
        name = info["name"]
        model = load_model(name, device="cpu", dtype="float32").model
        for precision in ("float32", "bfloat16", "int8"):
            r = roofline(decode_bytes(model, precision), bw.bytes_per_s)
            print(f"{name:<16} {precision:<9} {r.bytes_per_token / 1e6:>9.1f} {r.tokens_per_s:>11.1f} {r.ms_per_token:>9.1f}")
        floors.append((name, model))
    for name, model in floors:  # after the table: the floor of a float32 verify pass of n positions
        floor = verify_floors(model, (2, 5, 9, 17), bw.bytes_per_s)
        print(f"{name} float32, its shapes in cache: " + ", ".join(
            f"n={n}: {f.rate / 1e9:.0f} GFLOP/s, t(n) >= {f.seconds * 1e3:.0f} ms (v >= {f.seconds / floor[1].seconds:.2f})"
            for n, f in floor.items()))


if __name__ == "__main__":
    _main()
