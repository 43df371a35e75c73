"""The bounds on k (tokens drafted per step), each defined once.

Pure constants, no imports, so that torch-free modules (``limits``, ``theory``) can use them too.
Each bound has one meaning; import the one you mean rather than writing the number.
"""

from __future__ import annotations

# The engine's hard limit: SpeculativeDecoder refuses k above it, adaptive schedules never grow
# past it, the CLI and ``specviz bench --k`` accept 1..ENGINE_MAX_K.
ENGINE_MAX_K = 32

# The default cap on k for visitors of a hosted app (SPECVIZ_MAX_K when unset); a host may raise
# it up to ENGINE_MAX_K. The playground's k slider stops there.
HOSTING_DEFAULT_MAX_K = 16

# The k range the Learn tab's calculator draws its expected-speedup curve over (k = 1..this)
# and where its k slider stops.
LEARN_CURVE_MAX_K = 16

# The largest k the theory calculator accepts as typed input or in pasted measured runs: runs
# from other engines may draft more than specviz's engine, so this is above ENGINE_MAX_K.
THEORY_MAX_K = 64

__all__ = ["ENGINE_MAX_K", "HOSTING_DEFAULT_MAX_K", "LEARN_CURVE_MAX_K", "THEORY_MAX_K"]
