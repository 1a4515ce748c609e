"""Secure aggregation of a site's private leaves' releases.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
CCS 2017, with a threshold ``t``, for one site (an aggregator and its ``n`` leaves) and one
release slot; see docs/secure_aggregation.md. Pure and synchronous: no I/O, no clock; keys,
seeds and times come in as arguments. Needs the ``secagg`` extra (``cryptography``,
``shamirs``). Modules, one concept each:

- `masking`: integer encoding mod ``2**bits``, pair masks, self masks, Skellam noise shares.
- `shares`: Shamir sharing of 32-byte secrets (the ``shamirs`` library).
- `share_cipher`: the shares encrypted from leaf to leaf through the aggregator.
- `messages`: the slot's messages; `leaf_round` and `aggregator_round`: the two state machines.
- `errors`: `SecAggError`, `UnmaskRefusedError`.
- `accounting`: the guarantee of the distributed Skellam site sum, the smaller of its Renyi DP
  bound and `gdp`'s Gaussian-DP bound (numpy and scipy only).
- `gdp`: the Skellam mechanism's Gaussian-DP bound (f-DP), tight to the analytic Gaussian's.

Internal to the runtime, so ``__all__`` is empty: import each name from its module (which
loads only that module). `require_extra`, the check that the extra is installed, is here.
"""

from __future__ import annotations

import importlib.util

__all__: list[str] = []

_EXTRA_MODULES = ("cryptography", "shamirs")
"""What the ``secagg`` extra installs and a node of a secure-aggregation site imports."""


def require_extra(node_id: str) -> None:
    """Check, without importing them, that the ``secagg`` extra's modules are installed.

    Raises
    ------
    SecAggError
        (a ValueError: the CLI's exit status 2) naming the missing modules and the install
        command, at the start of a secure-aggregation node instead of at its first slot.
    """
    missing = [name for name in _EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        from edge_runtime.secagg.errors import SecAggError

        raise SecAggError(
            f"node {node_id!r}: mechanism 'gaussian-secagg' needs the secagg extra, missing "
            f"{', '.join(missing)}: pip install './edge_runtime-<version>-py3-none-any.whl"
            "[secagg]' (or '.[secagg]' in a clone)"
        )

