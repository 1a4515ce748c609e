"""Secure aggregation of a site's private leaves' releases (issue 26).

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
- `accounting`: Renyi DP of the distributed Skellam site sum (numpy and scipy only).

Names load on first use (`edge_runtime.lazy`), so importing one module loads only its own.
"""

from __future__ import annotations

from edge_runtime.lazy import lazy_names

__all__ = [
    "AggregatorPhase",
    "AggregatorRound",
    "KeyAdvertisement",
    "KeyRoster",
    "LeafPhase",
    "LeafRound",
    "MaskedInput",
    "RoundTimeouts",
    "SecAggError",
    "ShareDelivery",
    "ShareUpload",
    "SlotOutcome",
    "UnmaskRefusedError",
    "UnmaskRequest",
    "UnmaskResponse",
]

_MODULE_OF = {
    **dict.fromkeys(
        ("AggregatorPhase", "AggregatorRound", "RoundTimeouts"),
        "edge_runtime.secagg.aggregator_round",
    ),
    **dict.fromkeys(("LeafPhase", "LeafRound"), "edge_runtime.secagg.leaf_round"),
    **dict.fromkeys(("SecAggError", "UnmaskRefusedError"), "edge_runtime.secagg.errors"),
    **dict.fromkeys(
        (
            "KeyAdvertisement",
            "KeyRoster",
            "MaskedInput",
            "ShareDelivery",
            "ShareUpload",
            "SlotOutcome",
            "UnmaskRequest",
            "UnmaskResponse",
        ),
        "edge_runtime.secagg.messages",
    ),
}

__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, __all__)
