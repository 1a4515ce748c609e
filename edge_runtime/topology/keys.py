"""The keys of a topology file: their groups, TOML kinds, built-in defaults and allowed values.

Everything here is data; `edge_runtime.topology.checks` checks values against `KINDS`,
`edge_runtime.topology.loading` checks a file's tables against the key groups and
`edge_runtime.topology.node_checks` checks a node's values against the allowed values.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ADMIT_KEYS",
    "ALGORITHMS",
    "BUDGET_KEYS",
    "BUILTIN_DEFAULTS",
    "DATA_KEYS",
    "DEFAULTABLE_KEYS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PREFIX",
    "DEFAULT_RELEASE_HORIZON",
    "DEFAULT_SCORE_WARMUP",
    "DEFAULT_SECAGG_SLOT_S",
    "FEDPOWER_KEYS",
    "KINDS",
    "KIND_NAMES",
    "NODE_KEYS",
    "OUT_OF_RANGE_MODES",
    "PRIVACY_KEYS",
    "PUBLISH_KEYS",
    "SCORE_DETECTORS",
    "SCORE_KEYS",
    "SCORE_MODES",
    "SECAGG_KEYS",
    "SECAGG_MECHANISM",
    "SENSOR_KEYS",
    "SPLITS",
    "STALE_POLICIES",
    "TOP_LEVEL_KEYS",
]

SPLITS: tuple[str, ...] = ("contiguous", "round-robin")
"""The values of ``[data] split``: `edge_runtime.datasets.split.SPLITS`, copied so that an
agent, which needs no data, does not load `edge_runtime.datasets` (issue 24; a test pins the
copy)."""

DEFAULT_PREFIX = "fpca"
"""Topic prefix when the file sets none."""

DEFAULT_BLOCK_SIZE = 50
"""``block_size`` of a node that sets none, except a private leaf of mechanism "gaussian"
(which uses `edge_runtime.fpca.privacy.gaussian_default_block_size`, see `NodeConfig`)."""

DEFAULT_RELEASE_HORIZON = 64
"""``release_horizon`` of a private "gaussian" leaf that sets none (1 when ``forget < 1``).

Chosen by measurement: the noise std of a leaf's k-th release, relative to one release,
is ``sqrt(k)`` with horizon 1 (independent noise per block, summed) but
``continual_multiplier(H) * continual_multiplier(k)`` with horizon ``H``
(`edge_runtime.fpca.continual`); ``continual_multiplier(64)`` is about 1.5, so the first
release pays 1.5x and the 64th 2.4x instead of 8x."""

STALE_POLICIES: tuple[str, ...] = ("keep", "drop", "downweight")
"""What an aggregator does with a child that stopped sending (see `NodeConfig`)."""

SCORE_MODES: tuple[str, ...] = ("off", "reading", "interval")
"""A leaf's ``score``: no scoring, one scores document per reading, or one per interval."""

SCORE_DETECTORS: tuple[str, ...] = ("faults", "static")
"""A scoring leaf's ``score_detector``: the streaming sensor-fault detector warmed on the
leaf's own first readings (`edge_runtime.fpca.FaultDetector`), or Q / T^2 against the root's
model with static limits at ``score_alpha`` (`edge_runtime.fpca.AnomalyScorer`)."""

DEFAULT_SCORE_WARMUP = 2787
"""``score_warmup`` of a leaf that sets none: readings that warm the fault detector (see
`NodeConfig`). One Motes light device-day, the event benchmark's warm-up and the detector's
default ``halflife``. Measured (event benchmark, Motes light, 5 seeds, the same scored rows,
the detector at commit bccbef6 warmed on the last N warm-up rows): N = 800 gave 6.8 clean
alarm events per device-day (budget 2), precision 0.41, NAB 18.9; N = 1500 15.3 events,
precision 0.38; N = 2787 1.7 events, precision 0.90, NAB 26.0. The buffer is
``score_warmup x n_features`` float64 until the detector is built: 1.07 MB for 48 sensors,
6.7 MB for 300."""

OUT_OF_RANGE_MODES: tuple[str, ...] = ("reject", "clip")
"""A leaf's ``out_of_range``: drop a reading with any value outside ``valid_range``, or clip
each value into it."""

SECAGG_MECHANISM = "gaussian-secagg"
"""A private leaf's ``mechanism`` for secure aggregation with its site (issue 26): its parent
sums the site's masked releases (`edge_runtime.agents.leaf.core.secagg_release`). The
topology accepts it besides `edge_runtime.fpca.privacy.MECHANISMS`, which are
`FPCAEdge`'s own (the estimator does not run it: the leaf's shell does)."""

DEFAULT_SECAGG_SLOT_S = 600.0
"""``secagg_slot_s`` of a secure-aggregation site that sets none: one release slot every ten
minutes. Ten times the phases' timeouts (`edge_runtime.secagg.aggregator_round.
RoundTimeouts`, 60 s in all), so a slot with stragglers ends long before the next; each slot
costs a leaf about 11.5 kB sent and received at d = 48, n = 4 (`edge_runtime.wire.secagg`),
19 B/s; and every released slot adds its noise to the site's running sum (linearly with
H = 1, polylogarithmically within a segment of the continual release), so fewer slots mean
less noise for one model latency of ten minutes, short against the drift of a sensor
network's correlations. 144 slots a day: a segment of 64 (the default horizon) is 10.7 h."""

SECAGG_KEYS: tuple[str, ...] = ("secagg_threshold", "secagg_slot_s")
"""A secure-aggregation site's keys, on the aggregator whose children include leaves of
`SECAGG_MECHANISM` (not in ``[defaults]``)."""

ALGORITHMS: tuple[str, ...] = ("fpca", "fedpower")
"""The federated algorithms a topology may run (top-level ``algorithm``)."""

BUILTIN_DEFAULTS: dict[str, Any] = {
    "block_size": None,  # DEFAULT_BLOCK_SIZE, or the gaussian mechanism's (NodeConfig)
    "adaptive": False,
    "rank_bounds": (0.01, 0.10),
    "holdoff": 1,
    "idle_flush_s": None,
    "publish_min_interval_s": None,
    "publish_max_interval_s": None,
    "publish_angle_rad": None,
    "publish_spectrum_change": None,
    "publish_growth": None,
    "share": 1.0,
    "oversample": None,
    "forget": 1.0,
    "center": False,
    "stale_policy": "keep",
    "stale_after_s": 60.0,
    "stale_weight": 0.5,
    "epsilon": None,
    "delta": None,
    "clip_norm": None,
    "chunk_size": None,
    "mechanism": None,
    "release_horizon": None,
    "score": "off",
    "score_interval_s": 10.0,
    "score_alpha": 0.01,
    "score_allow_private": False,
    "score_detector": "faults",
    "score_warmup": DEFAULT_SCORE_WARMUP,
    "valid_range": None,
    "out_of_range": "reject",
    "max_reading_rate": None,
}
"""Per-node settings that ``[defaults]`` may set, with their built-in defaults (``rank`` has
none)."""

DEFAULTABLE_KEYS: tuple[str, ...] = ("rank", *BUILTIN_DEFAULTS)
"""Keys a ``[defaults]`` table may hold."""

NODE_KEYS: tuple[str, ...] = (
    "id",
    "parent",
    *DEFAULTABLE_KEYS,
    "sensor_topic",
    "noise_seed",
    "source",
    "open",
    "admit",
    *SECAGG_KEYS,
)
"""Keys a ``[[nodes]]`` table may hold."""

ADMIT_KEYS: tuple[str, ...] = DEFAULTABLE_KEYS
"""Keys the ``[nodes.admit]`` table of an open aggregator may hold: the settings of the
leaves it admits at run time, over ``[defaults]`` (the same keys as ``[defaults]``)."""

PRIVACY_KEYS: tuple[str, ...] = (
    "epsilon",
    "delta",
    "clip_norm",
    "chunk_size",
    "noise_seed",
    "mechanism",
    "release_horizon",
)
"""Differential-privacy keys: a leaf's settings only (``[defaults]`` values skip
aggregators)."""

BUDGET_KEYS: tuple[str, ...] = ("epsilon", "delta", "clip_norm")
"""The privacy keys given all together or not at all."""

PUBLISH_KEYS: tuple[str, ...] = (
    "idle_flush_s",
    "publish_min_interval_s",
    "publish_max_interval_s",
    "publish_angle_rad",
    "publish_spectrum_change",
    "publish_growth",
)
"""Flow-control keys (None: the role's default)."""

SCORE_KEYS: tuple[str, ...] = (
    "score",
    "score_interval_s",
    "score_alpha",
    "score_allow_private",
    "score_detector",
    "score_warmup",
)
"""Anomaly scoring of a leaf's readings (leaves only)."""

SENSOR_KEYS: tuple[str, ...] = ("valid_range", "out_of_range", "max_reading_rate")
"""What a leaf's sensors can produce, declared from their datasheet (leaves only)."""

FEDPOWER_KEYS: tuple[str, ...] = (
    "fedpower_local_steps",
    "fedpower_decay",
    "fedpower_rounds",
    "fedpower_quorum",
    "fedpower_round_timeout_s",
    "fedpower_round_interval_s",
    "fedpower_idle_interval_s",
    "fedpower_opt",
    "fedpower_tolerance_rad",
    "fedpower_seed",
)
"""Top-level keys of a FedPower topology (`FedPowerConfig` without the prefix)."""

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "name",
    "prefix",
    "algorithm",
    *FEDPOWER_KEYS,
    "defaults",
    "data",
    "nodes",
)
"""Keys of the document itself."""

DATA_KEYS: tuple[str, ...] = ("dataset", "split")
"""Keys of the ``[data]`` table."""

KINDS: dict[str, str] = {
    "id": "str",
    "parent": "str",
    "rank": "int",
    "block_size": "int",
    "adaptive": "bool",
    "rank_bounds": "bounds",
    "holdoff": "int",
    "idle_flush_s": "float",
    "publish_min_interval_s": "float",
    "publish_max_interval_s": "float",
    "publish_angle_rad": "float",
    "publish_spectrum_change": "float",
    "publish_growth": "float",
    "share": "float",
    "oversample": "int",
    "forget": "float",
    "center": "bool",
    "stale_policy": "str",
    "stale_after_s": "float",
    "stale_weight": "float",
    "epsilon": "float",
    "delta": "float",
    "clip_norm": "float",
    "chunk_size": "int",
    "noise_seed": "int",
    "mechanism": "str",
    "release_horizon": "int",
    "score": "str",
    "score_interval_s": "float",
    "score_alpha": "float",
    "score_allow_private": "bool",
    "score_detector": "str",
    "score_warmup": "int",
    "valid_range": "range",
    "out_of_range": "str",
    "max_reading_rate": "float",
    "sensor_topic": "str",
    "open": "bool",
    "secagg_threshold": "int",
    "secagg_slot_s": "float",
    "name": "str",
    "prefix": "str",
    "algorithm": "str",
    "fedpower_local_steps": "int",
    "fedpower_decay": "str",
    "fedpower_rounds": "int",
    "fedpower_round_timeout_s": "float",
    "fedpower_round_interval_s": "float",
    "fedpower_idle_interval_s": "float",
    "fedpower_opt": "bool",
    "fedpower_tolerance_rad": "float",
    "fedpower_seed": "int",
    "dataset": "str",
    "split": "str",
}
"""Expected kind of each key: "int", "float" (an integer is accepted), "bool", "str",
"bounds" (two numbers) or "range" (``valid_range``)."""

KIND_NAMES: dict[str, str] = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "str": "a string",
    "bounds": "an array of two numbers [lower, upper]",
    "range": (
        "two numbers [lo, hi] or two arrays of as many numbers [[lo1, lo2, ...], [hi1, hi2, ...]]"
    ),
}
"""Each kind of `KINDS` as an error message names it."""
