"""Tree shapes beside chains: expand tree proposer specs over node budgets, and count a step's
"positions" by depth.

``specviz bench --proposer ngram-tree --proposer draft-tree:smollm2-135m --tree-nodes 4,8,16``
sweeps each tree spec at every node budget (depth = the sweep's k), beside the chains; the
Benchmark tab does the same with its "tree nodes" box. Pure text functions: nothing loads.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..core.bounds import THEORY_MAX_K

TREE_PREFIXES = ("ngram-tree", "draft-tree")

__all__ = ["TREE_PREFIXES", "is_tree_spec", "parse_tree_nodes", "with_tree_nodes", "expand_tree_shapes"]


def is_tree_spec(spec: str) -> bool:
    """True for ``ngram-tree[...]`` and ``draft-tree:...`` specs."""
    head = (spec or "").strip().partition(":")[0].strip().lower()
    return head in TREE_PREFIXES


def parse_tree_nodes(text: str | Iterable[int] | None) -> tuple[int, ...]:
    """'4,8,16' (or ints) -> (4, 8, 16), sorted and unique; '' or None -> () (keep each spec's own)."""
    if text is None:
        return ()
    if isinstance(text, str):
        parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
        if not parts:
            return ()
        if not all(p.isdigit() for p in parts):
            raise ValueError(f"tree nodes must be a comma-separated list of whole numbers like 4,8,16, got {text!r}")
        nodes = [int(p) for p in parts]
    else:
        nodes = []
        for n in text:
            if isinstance(n, bool) or int(n) != n:
                raise ValueError(f"tree nodes must be whole numbers, got {n!r}")
            nodes.append(int(n))
    bad = [n for n in nodes if not 1 <= n <= THEORY_MAX_K]
    if bad:
        raise ValueError(f"tree nodes (the node budget per step) must be from 1 to {THEORY_MAX_K}, got {bad[0]}")
    return tuple(sorted(set(nodes)))


def with_tree_nodes(spec: str, nodes: int) -> str:
    """The tree spec with its ``nodes=`` option set to ``nodes`` (other options kept); a chain
    spec is returned unchanged. 'ngram-tree' -> 'ngram-tree:3,nodes=8' (the default N written out);
    'draft-tree:m,width=3' -> 'draft-tree:m,width=3,nodes=8'."""
    if not is_tree_spec(spec):
        return spec
    head, sep, arg = spec.strip().partition(":")
    main, *opts = arg.split(",") if sep else [""]
    kept = [o.strip() for o in opts if o.strip() and o.partition("=")[0].strip().lower() != "nodes"]
    main = main.strip()
    if not main and head.strip().lower() == "ngram-tree":
        from ..proposers.ngram_tree import NGRAM_TREE_DEFAULTS

        main = str(NGRAM_TREE_DEFAULTS["max_ngram"])  # the registry wants N before the options
    return f"{head.strip()}:{','.join([main, *kept, f'nodes={int(nodes)}'])}"


def expand_tree_shapes(specs: Sequence[str], nodes: Sequence[int] = ()) -> list[str]:
    """Every tree spec once per node budget in ``nodes`` (chains and target-only as given);
    with no ``nodes`` the specs are returned as they are. Order kept, duplicates dropped."""
    out: list[str] = []
    for spec in specs:
        if nodes and is_tree_spec(spec):
            out.extend(with_tree_nodes(spec, n) for n in nodes)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))
