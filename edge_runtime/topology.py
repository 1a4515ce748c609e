"""The aggregation tree: nodes, their FPCA settings and MQTT topic names, read from TOML.

A topology is a rooted tree of nodes. A node without children is a *leaf*: it reads sensor
readings (from its ``sensor_topic``) and runs FPCA-Edge (Grammenos et al., "Federated Principal
Component Analysis", NeurIPS 2020, eq. (3) block update, eq. (4) adaptive rank). A node with
children is an *aggregator*: it merges its children's latest subspaces (Alg. 2, Merge_r) and
publishes upwards; the one node without a parent is the *root*, whose merge is the global
estimate (Alg. 1). The format is documented in ``topologies/README.md``; in short::

    name = "motes-light"
    prefix = "fpca"                # topic prefix, default "fpca"
    [defaults]                     # any per-node setting; a node's own keys override
    rank = 10
    [data]
    dataset = "motes-light"        # built-in dataset name or a path relative to this file
    split = "contiguous"           # or "round-robin"
    [[nodes]]
    id = "root"
    [[nodes]]
    id = "pi-01"
    parent = "root"

A leaf may run with differential privacy: the keys ``epsilon``, ``delta`` and ``clip_norm``
(all three or none; leaves only, an aggregator reports the weakest guarantee of its
children), optionally ``mechanism`` (``"gaussian"``, the default: the Gaussian mechanism on
block Gram matrices with continual release over ``release_horizon`` blocks; or
``"fpca-eq8"``: streaming MOD-SuLQ, eq. (5)-(8) and Lemma 2, with its ``chunk_size``) and
``noise_seed``. The mechanisms are described in `edge_runtime.fpca.privacy`.

A leaf may declare what its sensors can produce, from their datasheet (issue 14):
``valid_range = [lo, hi]`` (or per feature ``[[lo1, ...], [hi1, ...]]``), with
``out_of_range = "reject"`` (the default: a reading with a value outside is dropped) or
``"clip"``, and ``max_reading_rate`` (readings per second). Leaves only, like the privacy
keys; `Topology.reading_norm_sq_bound` and `Topology.max_reading_rate` bound the readings
under any node.

A leaf may read its readings from a local source instead of its sensor topic (issue 11):
``source = { kind = "command", command = ["sh", "motes.sh"], format = "csv" }`` (kinds
``command``, ``file``, ``serial``; ``mqtt`` is the default and may name the ``topic``), see
`edge_runtime.sources.SourceSpec`. Leaves only, and not in ``[defaults]`` (two leaves reading
one file or port would count its readings twice); a relative ``path`` is relative to the
TOML file's folder.

Topics (``<path>`` is the chain of ids from the root, e.g. ``root/site-a/pi-01``):
``<prefix>/<path>/subspace`` (retained snapshot), ``<prefix>/<path>/status`` (online/offline),
``<prefix>/<path>/status/detail`` (JSON), ``<prefix>/<path>/confirm`` (a leaf's reading
confirmations, JSON), ``<prefix>/<root>/model`` (global estimate); an
aggregator subscribes to ``<prefix>/<path>/+/subspace``.

Every problem raises `TopologyError` (a `ValueError`) with a one-line message that names the
file (when there is one) and the offending node or key.
"""

from __future__ import annotations

import datetime
import difflib
import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from edge_runtime.datasets import BUILTIN_DATASETS, builtin_dataset_path
from edge_runtime.errors import EdgeRuntimeError
from edge_runtime.fedpower.accounting import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.fedpower.schedule import Schedule
from edge_runtime.fpca.continual import MAX_HORIZON
from edge_runtime.fpca.privacy import MECHANISMS, gaussian_default_block_size
from edge_runtime.sources.spec import SourceSpec

__all__ = [
    "ALGORITHMS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_PREFIX",
    "DEFAULT_RELEASE_HORIZON",
    "MAX_ID_LENGTH",
    "RESERVED_IDS",
    "SPLITS",
    "STALE_POLICIES",
    "FedPowerConfig",
    "NodeConfig",
    "Topology",
    "TopologyError",
    "load_topology",
    "parse_topology",
]

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

MAX_ID_LENGTH = 64
"""Longest node id, in characters."""

RESERVED_IDS: frozenset[str] = frozenset(
    {"subspace", "status", "model", "confirm", "round", "reply"}
)
"""Ids that would collide with the topic names a node publishes under its path."""

SPLITS: tuple[str, ...] = ("contiguous", "round-robin")
"""How `Topology.split_rows` deals a dataset's rows to the leaves."""

STALE_POLICIES: tuple[str, ...] = ("keep", "drop", "downweight")
"""What an aggregator does with a child that stopped sending (see `NodeConfig`)."""

_DEFAULT_SENSOR_TOPIC = "sensors/{id}"

# Per-node settings that [defaults] may set, with their built-in defaults (rank has none).
_BUILTIN_DEFAULTS: dict[str, Any] = {
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
    "valid_range": None,
    "out_of_range": "reject",
    "max_reading_rate": None,
}
_DEFAULTABLE_KEYS = ("rank", *_BUILTIN_DEFAULTS)
_NODE_KEYS = ("id", "parent", *_DEFAULTABLE_KEYS, "sensor_topic", "noise_seed", "source")
# Differential-privacy keys: a leaf's settings only ([defaults] values skip aggregators).
_PRIVACY_KEYS = (
    "epsilon",
    "delta",
    "clip_norm",
    "chunk_size",
    "noise_seed",
    "mechanism",
    "release_horizon",
)
_BUDGET_KEYS = ("epsilon", "delta", "clip_norm")
_PUBLISH_KEYS = (
    "idle_flush_s",
    "publish_min_interval_s",
    "publish_max_interval_s",
    "publish_angle_rad",
    "publish_spectrum_change",
    "publish_growth",
)
# Anomaly scoring of a leaf's readings against the root's model (leaves only).
_SCORE_KEYS = ("score", "score_interval_s", "score_alpha", "score_allow_private")
SCORE_MODES: tuple[str, ...] = ("off", "reading", "interval")
"""A leaf's ``score``: no scoring, one scores document per reading, or one per interval."""

# What a leaf's sensors can produce, declared from their datasheet (leaves only).
_SENSOR_KEYS = ("valid_range", "out_of_range", "max_reading_rate")
OUT_OF_RANGE_MODES: tuple[str, ...] = ("reject", "clip")
"""A leaf's ``out_of_range``: drop a reading with any value outside ``valid_range``, or clip
each value into it."""

ALGORITHMS: tuple[str, ...] = ("fpca", "fedpower")
"""The federated algorithms a topology may run (top-level ``algorithm``)."""

_FEDPOWER_KEYS = (
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
_TOP_LEVEL_KEYS = ("name", "prefix", "algorithm", *_FEDPOWER_KEYS, "defaults", "data", "nodes")
_DATA_KEYS = ("dataset", "split")

# Expected kind of each key: "int", "float" (an integer is accepted), "bool", "str", "bounds".
_KINDS: dict[str, str] = {
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
    "valid_range": "range",
    "out_of_range": "str",
    "max_reading_rate": "float",
    "sensor_topic": "str",
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
_KIND_NAMES = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "str": "a string",
    "bounds": "an array of two numbers [lower, upper]",
    "range": (
        "two numbers [lo, hi] or two arrays of as many numbers [[lo1, lo2, ...], [hi1, hi2, ...]]"
    ),
}

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_TOML_POSITION = re.compile(r"^(?P<msg>.*) \(at line (?P<line>\d+), column (?P<col>\d+)\)$")
_TOML_AT_END = re.compile(r"^(?P<msg>.*) \(at end of document\)$")


class TopologyError(EdgeRuntimeError, ValueError):
    """A topology file is missing, not valid TOML, or does not describe a valid tree."""


# --------------------------------------------------------------------------------------------
# Checks shared by parsing and direct construction


def _toml_type(value: object) -> str:
    """The TOML name of a parsed value's type, for error messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, datetime.datetime):
        return "datetime"
    if isinstance(value, datetime.date):
        return "date"
    if isinstance(value, datetime.time):
        return "time"
    return type(value).__name__


def _toml_repr(value: object) -> str:
    """A value as it would be written in TOML (booleans lower case), for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_repr(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_repr(v)}" for k, v in value.items()) + "}"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_range(value: object) -> bool:
    """Two numbers, or two non-empty arrays of numbers of one length (``valid_range``)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return False
    if all(_is_number(v) for v in value):
        return True
    return (
        all(isinstance(v, list | tuple) and v for v in value)
        and len(value[0]) == len(value[1])
        and all(_is_number(x) for v in value for x in v)
    )


def _check_kind(where: str, key: str, value: object) -> object:
    """Check a value's TOML type against ``_KINDS[key]``; return it normalised (floats, tuples).

    ``where`` names the place for the message, e.g. ``"node 'pi-01'"`` or ``"[defaults]"``.
    """
    kind = _KINDS[key]
    ok = (
        (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
        or (kind == "float" and _is_number(value))
        or (kind == "bool" and isinstance(value, bool))
        or (kind == "str" and isinstance(value, str))
        or (
            kind == "bounds"
            and isinstance(value, list | tuple)
            and len(value) == 2
            and all(_is_number(v) for v in value)
        )
        or (kind == "range" and _is_range(value))
    )
    if not ok:
        raise TopologyError(
            f"{where}: {key} must be {_KIND_NAMES[kind]}, "
            f"got {_toml_type(value)} {_toml_repr(value)}"
        )
    if kind == "float":
        return float(value)  # type: ignore[arg-type]
    if kind == "bounds":
        return (float(value[0]), float(value[1]))  # type: ignore[index]
    if kind == "range":
        lo, hi = value  # type: ignore[misc]
        if _is_number(lo):
            return (float(lo), float(hi))
        return (tuple(float(x) for x in lo), tuple(float(x) for x in hi))
    return value


def _check_n_features(n_features: object) -> None:
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise ValueError(f"n_features must be an integer >= 1, got {n_features!r}")


def _unknown_key_message(where: str, key: str, allowed: Iterable[str]) -> str:
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown key {key!r} (expected one of: {', '.join(allowed)}){hint}"


def _check_keys(where: str, table: Mapping[str, object], allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    for key in table:
        if key not in allowed:
            raise TopologyError(_unknown_key_message(where, key, allowed))


def _node_id_problem(node_id: str) -> str | None:
    """Why ``node_id`` is not a valid single MQTT topic level for a node, or ``None``."""
    if node_id == "":
        return "is empty"
    if len(node_id) > MAX_ID_LENGTH:
        return f"is {len(node_id)} characters long, at most {MAX_ID_LENGTH} are allowed"
    for char in ("/", "+", "#"):
        if char in node_id:
            return f"contains {char!r}; an id must be a single MQTT topic level without wildcards"
    if "\x00" in node_id:
        return "contains a NUL character"
    if _CONTROL_CHARS.search(node_id):
        return "contains a control character"
    if node_id in RESERVED_IDS:
        return f"is reserved for topic names ({', '.join(sorted(RESERVED_IDS))})"
    return None


def _check_node_id(node_id: str, where: str = "") -> None:
    problem = _node_id_problem(node_id)
    if problem is not None:
        raise TopologyError(f"{where}node id {node_id!r} {problem}")


def _prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` is not a valid topic prefix, or ``None``."""
    if prefix == "":
        return "is empty"
    if "+" in prefix or "#" in prefix:
        return "contains an MQTT wildcard ('+' or '#')"
    if "\x00" in prefix:
        return "contains a NUL character"
    if prefix.startswith("/") or prefix.endswith("/"):
        return "starts or ends with '/'"
    if "//" in prefix:
        return "has an empty topic level ('//')"
    if prefix.startswith("$"):
        return "starts with '$' (reserved for broker topics such as $SYS)"
    return None


def _topic_filter_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid MQTT topic filter (MQTT 3.1.1 section 4.7), or ``None``."""
    if topic == "":
        return "is empty"
    if "\x00" in topic:
        return "contains a NUL character"
    if len(topic.encode("utf-8")) > 65535:
        return "is longer than 65535 bytes"
    levels = topic.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return "uses '#' other than as the whole last level"
        if "+" in level and level != "+":
            return "uses '+' other than as a whole level"
    return None


# --------------------------------------------------------------------------------------------
# Public types


@dataclass(frozen=True)
class NodeConfig:
    """One node of a topology and the FPCA settings its agent runs with.

    Parameters
    ----------
    id : str
        A single MQTT topic level: non-empty, at most `MAX_ID_LENGTH` characters, without
        ``/``, ``+``, ``#``, NUL or other control characters, and none of `RESERVED_IDS`.
    parent : str or None
        The parent's id; ``None`` for the root.
    rank : int
        Initial rank ``r`` of the node's subspace, >= 1 (for an aggregator, the rank Merge_r
        truncates to, Alg. 2).
    block_size : int or None, default None
        Block size ``b`` of the streaming update, eq. (3) (a private leaf releases one
        block at a time); >= ``rank``. None gives `DEFAULT_BLOCK_SIZE` (50), except on a
        private leaf of mechanism ``"gaussian"``, where it stays None and the leaf uses
        `edge_runtime.fpca.privacy.gaussian_default_block_size` ``(epsilon, delta,
        n_features, release_horizon)`` once the width of a reading is known (see
        `block_size_for`): the smallest block whose release noise has an expected spectral
        norm of at most a tenth of the block's largest possible eigenvalue (517 readings at
        epsilon 1, delta 1e-5, d 48, horizon 1; 799 at horizon 64). A mechanism
        ``"fpca-eq8"`` leaf keeps 50, as before.
    adaptive : bool, default False
        Adapt the rank after each block, eq. (4).
    rank_bounds : tuple of float (lower, upper), default (0.01, 0.10)
        Bounds on the energy ratio of eq. (4), ``0 < lower < upper < 1``.
    holdoff : int, default 1
        Blocks between two rank changes, >= 1.
    idle_flush_s : float or None, default None
        Seconds, > 0: a node with unpublished data publishes once no input (readings for a
        leaf, child snapshots for an aggregator) has arrived for this long (the trailing
        publish; a private leaf masks its pending readings then). None: the role's default,
        `edge_runtime.agents.policy.LEAF_PUBLISH` / ``AGGREGATOR_PUBLISH``.
    publish_min_interval_s, publish_max_interval_s : float or None, default None
        Seconds, >= 0: least time between two snapshots of this node, and most time a change
        may wait while unpublished (max >= min). None: the role's default.
    publish_angle_rad, publish_spectrum_change, publish_growth : float or None, default None
        The publish deadband (`edge_runtime.agents.policy.PublishPolicy`): largest principal
        angle (radians, >= 0), relative change of the normalised spectrum (> 0), relative
        growth of the sample count (> 0). None: the role's default.
    sensor_topic : str or None, default None
        MQTT topic filter a leaf reads its sensor readings from (``"sensors/<id>"`` when parsed
        from TOML); ``None`` for aggregators.
    share : float, default 1.0
        Relative share of a dataset's rows for the contiguous split, finite and > 0.
    oversample : int or None, default None
        Extra directions ``p >= 0`` tracked beyond ``rank`` (`FPCAEdge`'s ``oversample``);
        snapshots carry ``rank + p`` directions and aggregators merge at ``rank + p``, the
        root's model is truncated to ``rank``. None uses `FPCAEdge`'s default.
    forget : float, default 1.0
        Forgetting factor ``lambda`` in (0, 1] of a leaf's block updates, eq. (2).
    center : bool, default False
        Track the streaming mean and summarise centred data (merged with the mean
        correction); the paper's default is uncentred.
    stale_policy : {"keep", "drop", "downweight"}, default "keep"
        What an aggregator does with a child whose last snapshot is older than
        ``stale_after_s``: keep it (its data still counts), drop it from the merge, or
        scale its singular values by ``stale_weight``.
    stale_after_s : float, default 60.0
        Seconds without a new snapshot after which a child is stale, > 0.
    stale_weight : float, default 0.5
        Factor in (0, 1) on a stale child's singular values under ``"downweight"``.
    epsilon : float or None, default None
        Differential privacy of a leaf: the budget epsilon per reading, finite and > 0,
        for replace-one neighbours. ``epsilon``, ``delta`` and ``clip_norm`` are given
        together or not at all; None (all three) publishes without noise. Leaves only: an
        aggregator reports the weakest guarantee of its children.
    delta : float or None, default None
        The privacy failure probability, ``0 < delta < 1`` (keep it below 1 / the number of
        readings for a meaningful guarantee).
    clip_norm : float or None, default None
        Euclidean norm, in the readings' units, > 0, each reading is clipped to before it
        enters a block (the sensitivity bound behind eq. (8)).
    chunk_size : int or None, default None
        Columns ``c >= 1`` of a block's masked covariance built at a time (eq. (7)); only
        with mechanism ``"fpca-eq8"``. None uses `FPCAEdge`'s default,
        ``min(n_features, block_size)``.
    noise_seed : int or None, default None
        Seed ``>= 0`` of the leaf's noise generator, for reproducible experiments; needs
        privacy. None draws from the operating system's entropy. Anyone who knows the seed
        can regenerate the noise and remove it, so leave it unset in deployments; two
        leaves of one topology may not share a seed (their noise would cancel in the
        difference of their snapshots). It cannot be set in ``[defaults]``.
    mechanism : str or None, default None
        The private mechanism of a leaf, one of `edge_runtime.fpca.privacy.MECHANISMS`:
        ``"gaussian"`` (the default with privacy: the Gaussian mechanism on each block's
        Gram matrix, analytic calibration, continual release) or ``"fpca-eq8"`` (streaming
        MOD-SuLQ, eq. (8) of Grammenos et al. 2020, to reproduce the paper). Needs privacy;
        None without it.
    release_horizon : int or None, default None
        Releases per segment of the square-root factorisation of a ``"gaussian"`` leaf
        (`edge_runtime.fpca.continual`), 1 to `edge_runtime.fpca.continual.MAX_HORIZON`;
        1 noises each block independently. Defaults to `DEFAULT_RELEASE_HORIZON` (64), or
        to 1 when ``forget < 1`` (the factorisation releases plain prefix sums, which a
        forgetting factor would not be; an explicit value > 1 with ``forget < 1`` is an
        error). None for ``"fpca-eq8"`` and without privacy.
    source : SourceSpec or None, default None
        A leaf's local sensor source (`edge_runtime.sources.SourceSpec` of kind
        ``"command"``, ``"file"`` or ``"serial"``): the leaf reads its readings from it and
        does not subscribe to ``sensor_topic`` (which keeps its default value). None: the
        leaf reads ``sensor_topic`` over MQTT (a TOML ``source = { kind = "mqtt", topic =
        "..." }`` sets ``sensor_topic``). Leaves only; not in ``[defaults]``.
    score : {"off", "reading", "interval"}, default "off"
        Anomaly scoring of a leaf's readings against the root's model
        (`edge_runtime.agents.scoring_core`): none, one JSON document per reading, or one
        per ``score_interval_s``, on ``<prefix>/<path>/scores``. Leaves of FPCA topologies
        only (a ``[defaults]`` value skips aggregators).
    score_interval_s : float, default 10.0
        Seconds of one batch in ``"interval"`` mode, > 0.
    score_alpha : float, default 0.01
        Significance in (0, 1) of the Q and T^2 limits.
    score_allow_private : bool, default False
        Let a private leaf publish scores: each document reveals a reading's Q and T^2,
        which the privacy guarantee does not cover, so a private leaf refuses ``score``
        without it.
    valid_range : tuple or None, default None
        The range a leaf's sensors can produce, in their units, from their datasheet (never
        from the data): ``(lo, hi)`` for every feature, or ``((lo_1, ..., lo_d), (hi_1,
        ..., hi_d))`` per feature (TOML: ``[lo, hi]`` or ``[[lo_1, ...], [hi_1, ...]]``);
        finite, ``lo < hi`` for every feature. Every reading is checked against it before
        it reaches the estimator or the scoring (`edge_runtime.agents.leaf_core.LeafCore`);
        per-feature bounds of another width than the readings reject every reading
        (reason ``valid_range_width``). None: no check. Leaves only (a ``[defaults]``
        value skips aggregators).
    out_of_range : {"reject", "clip"}, default "reject"
        What a leaf does with a reading that has a value outside ``valid_range``: drop it
        (counted in ``rejects["out_of_range"]``; it still counts as ingested in its
        source's sequence) or clip each value into the range (counted as ``clipped``).
        ``"clip"`` needs ``valid_range``.
    max_reading_rate : float or None, default None
        Readings per second a leaf's sensor can produce at most (declared, finite, > 0),
        for the plausibility checks upstream (`Topology.max_reading_rate`). None: not
        declared. Leaves only.

    Raises
    ------
    TopologyError
        If a value is of the wrong type or out of range; the message names the node.
    """

    id: str
    parent: str | None
    rank: int
    block_size: int | None = None
    adaptive: bool = False
    rank_bounds: tuple[float, float] = (0.01, 0.10)
    holdoff: int = 1
    idle_flush_s: float | None = None
    publish_min_interval_s: float | None = None
    publish_max_interval_s: float | None = None
    publish_angle_rad: float | None = None
    publish_spectrum_change: float | None = None
    publish_growth: float | None = None
    sensor_topic: str | None = None
    share: float = 1.0
    oversample: int | None = None
    forget: float = 1.0
    center: bool = False
    stale_policy: str = "keep"
    stale_after_s: float = 60.0
    stale_weight: float = 0.5
    epsilon: float | None = None
    delta: float | None = None
    clip_norm: float | None = None
    chunk_size: int | None = None
    noise_seed: int | None = None
    mechanism: str | None = None
    release_horizon: int | None = None
    source: SourceSpec | None = None
    score: str = "off"
    score_interval_s: float = 10.0
    score_alpha: float = 0.01
    score_allow_private: bool = False
    valid_range: tuple[float, float] | tuple[tuple[float, ...], tuple[float, ...]] | None = None
    out_of_range: str = "reject"
    max_reading_rate: float | None = None

    @property
    def privacy(self) -> tuple[float, float] | None:
        """``(epsilon, delta)`` of a private leaf, or None (published without noise)."""
        if self.epsilon is None or self.delta is None:
            return None
        return (self.epsilon, self.delta)

    def block_size_for(self, n_features: int) -> int:
        """The block size this node's estimator uses for readings of ``n_features`` values.

        ``block_size`` when set; for a private ``"gaussian"`` leaf without one,
        `edge_runtime.fpca.privacy.gaussian_default_block_size` ``(epsilon, delta,
        n_features, release_horizon)``. At least ``min(rank, n_features)``.

        Raises
        ------
        ValueError
            If ``n_features < 1``, or the default block would exceed the memory bound of
            `gaussian_default_block_size` (set ``block_size`` then).
        """
        _check_n_features(n_features)
        rank = min(self.rank, n_features)
        if self.block_size is not None:
            return max(self.block_size, rank)
        assert self.epsilon is not None and self.delta is not None  # by __post_init__
        horizon = 1 if self.release_horizon is None else self.release_horizon
        size = gaussian_default_block_size(self.epsilon, self.delta, n_features, horizon)
        return max(size, rank)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise TopologyError(
                f"node id must be a string, got {_toml_type(self.id)} {_toml_repr(self.id)}"
            )
        _check_node_id(self.id)
        where = f"node {self.id!r}"
        if self.parent is not None:
            _check_kind(where, "parent", self.parent)
        for key in ("rank", "adaptive", "holdoff", "center"):
            _check_kind(where, key, getattr(self, key))
        if self.block_size is not None:
            _check_kind(where, "block_size", self.block_size)
        if self.oversample is not None:
            _check_kind(where, "oversample", self.oversample)
            if self.oversample < 0:
                raise TopologyError(f"{where}: oversample must be >= 0, got {self.oversample}")
        _check_kind(where, "stale_policy", self.stale_policy)
        if self.stale_policy not in STALE_POLICIES:
            raise TopologyError(
                f"{where}: stale_policy must be one of {', '.join(STALE_POLICIES)}, "
                f"got {self.stale_policy!r}"
            )
        for key in ("rank_bounds", "share", "forget", "stale_after_s"):
            object.__setattr__(self, key, _check_kind(where, key, getattr(self, key)))
        if self.rank < 1:
            raise TopologyError(f"{where}: rank must be >= 1, got {self.rank}")
        if self.block_size is not None and self.block_size < self.rank:
            raise TopologyError(
                f"{where}: block_size must be >= rank ({self.rank}), got {self.block_size}"
            )
        lower, upper = self.rank_bounds
        if not 0.0 < lower < upper < 1.0:
            raise TopologyError(
                f"{where}: rank_bounds must satisfy 0 < lower < upper < 1, got [{lower}, {upper}]"
            )
        if self.holdoff < 1:
            raise TopologyError(f"{where}: holdoff must be >= 1 block, got {self.holdoff}")
        self._check_publish_policy(where)
        object.__setattr__(
            self, "stale_weight", _check_kind(where, "stale_weight", self.stale_weight)
        )
        if not (math.isfinite(self.stale_after_s) and self.stale_after_s > 0):
            raise TopologyError(
                f"{where}: stale_after_s must be > 0 seconds, got {self.stale_after_s}"
            )
        if not 0.0 < self.stale_weight < 1.0:
            raise TopologyError(f"{where}: stale_weight must be in (0, 1), got {self.stale_weight}")
        if not 0.0 < self.forget <= 1.0:
            raise TopologyError(f"{where}: forget must be in (0, 1], got {self.forget}")
        if not (math.isfinite(self.share) and self.share > 0):
            raise TopologyError(f"{where}: share must be a finite number > 0, got {self.share}")
        if self.sensor_topic is not None:
            _check_kind(where, "sensor_topic", self.sensor_topic)
            problem = _topic_filter_problem(self.sensor_topic)
            if problem is not None:
                raise TopologyError(
                    f"{where}: sensor_topic {self.sensor_topic!r} is not a valid MQTT topic "
                    f"filter: it {problem}"
                )
        if self.source is not None and (
            not isinstance(self.source, SourceSpec) or not self.source.is_local
        ):
            raise TopologyError(
                f"{where}: source must be a local SourceSpec (kind 'command', 'file' or "
                f"'serial'; an mqtt source is sensor_topic), got {self.source!r}"
            )
        self._check_privacy(where)
        self._check_scoring(where)
        self._check_sensor_range(where)
        if self.block_size is None and self.mechanism != "gaussian":
            object.__setattr__(self, "block_size", DEFAULT_BLOCK_SIZE)

    def _check_scoring(self, where: str) -> None:
        """Types and ranges of the anomaly-scoring keys (`SCORE_MODES`), and the privacy
        rule: a private leaf scores only with ``score_allow_private = true``."""
        for key in _SCORE_KEYS:
            object.__setattr__(self, key, _check_kind(where, key, getattr(self, key)))
        if self.score not in SCORE_MODES:
            raise TopologyError(
                f"{where}: score must be one of {', '.join(map(repr, SCORE_MODES))}, "
                f"got {self.score!r}"
            )
        if not (math.isfinite(self.score_interval_s) and self.score_interval_s > 0):
            raise TopologyError(
                f"{where}: score_interval_s must be > 0 seconds, got {self.score_interval_s}"
            )
        if not 0.0 < self.score_alpha < 1.0:
            raise TopologyError(f"{where}: score_alpha must be in (0, 1), got {self.score_alpha}")
        if self.score != "off" and self.epsilon is not None and not self.score_allow_private:
            raise TopologyError(
                f"{where}: score = {self.score!r} publishes the Q of each reading of a private "
                "leaf, which the privacy guarantee does not cover; set score_allow_private = "
                "true to publish them anyway"
            )

    def _check_sensor_range(self, where: str) -> None:
        """Types and ranges of ``valid_range``, ``out_of_range`` and ``max_reading_rate``."""
        if self.valid_range is not None:
            valid_range = _check_kind(where, "valid_range", self.valid_range)
            object.__setattr__(self, "valid_range", valid_range)
            lo, hi = (np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in valid_range)  # type: ignore[union-attr]
            if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                raise TopologyError(
                    f"{where}: valid_range must be finite numbers (the sensors' range from "
                    f"their datasheet), got {_toml_repr(valid_range)}"
                )
            bad = np.flatnonzero(lo >= hi)
            if bad.size:
                j = int(bad[0])
                at = f" for feature {j}" if lo.size > 1 else ""
                raise TopologyError(
                    f"{where}: valid_range must have lo < hi{at}, got lo {lo[j]} and hi {hi[j]}"
                )
        _check_kind(where, "out_of_range", self.out_of_range)
        if self.out_of_range not in OUT_OF_RANGE_MODES:
            raise TopologyError(
                f"{where}: out_of_range must be one of "
                f"{', '.join(map(repr, OUT_OF_RANGE_MODES))}, got {self.out_of_range!r}"
            )
        if self.out_of_range == "clip" and self.valid_range is None:
            raise TopologyError(
                f"{where}: out_of_range = 'clip' needs valid_range (the range to clip into)"
            )
        if self.max_reading_rate is not None:
            rate = _check_kind(where, "max_reading_rate", self.max_reading_rate)
            object.__setattr__(self, "max_reading_rate", rate)
            if not (math.isfinite(rate) and rate > 0):  # type: ignore[arg-type]
                raise TopologyError(
                    f"{where}: max_reading_rate must be a finite number > 0 (readings per "
                    f"second), got {rate}"
                )

    @property
    def valid_range_width(self) -> int | None:
        """Features of a per-feature ``valid_range``; None for ``[lo, hi]`` or no range."""
        if self.valid_range is None or not isinstance(self.valid_range[0], tuple):
            return None
        return len(self.valid_range[0])

    def range_bounds(self, n_features: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lo, hi)``, each of shape ``(n_features,)`` float64, of ``valid_range`` for
        readings of ``n_features`` values; None without a range.

        Raises
        ------
        ValueError
            If ``n_features < 1`` or per-feature bounds are of another width.
        """
        _check_n_features(n_features)
        if self.valid_range is None:
            return None
        width = self.valid_range_width
        if width is not None and width != n_features:
            raise ValueError(
                f"valid_range of node {self.id!r} has {width} values per bound, the readings "
                f"have {n_features}"
            )
        lo, hi = (
            np.broadcast_to(np.asarray(bound, dtype=np.float64), (n_features,)).copy()
            for bound in self.valid_range
        )
        return lo, hi

    def reading_norm_sq_bound(self, n_features: int) -> float | None:
        """Largest squared Euclidean norm of a reading of ``n_features`` values inside
        ``valid_range``, ``sum_j max(lo_j**2, hi_j**2)``; None without a range or when
        per-feature bounds are of another width (the leaf then rejects every reading).

        Raises
        ------
        ValueError
            If ``n_features < 1``.
        """
        _check_n_features(n_features)
        width = self.valid_range_width
        if self.valid_range is None or (width is not None and width != n_features):
            return None
        bounds = self.range_bounds(n_features)
        assert bounds is not None
        lo, hi = bounds
        return float(np.maximum(lo * lo, hi * hi).sum())

    def _check_publish_policy(self, where: str) -> None:
        """Types and ranges of the flow-control keys (None: the role's default)."""
        for key in _PUBLISH_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            value = _check_kind(where, key, value)
            object.__setattr__(self, key, value)
            positive = key in ("idle_flush_s", "publish_spectrum_change", "publish_growth")
            if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                raise TopologyError(
                    f"{where}: {key} must be a finite number {'> 0' if positive else '>= 0'}, "
                    f"got {value}"
                )
        low, high = self.publish_min_interval_s, self.publish_max_interval_s
        if low is not None and high is not None and high < low:
            raise TopologyError(
                f"{where}: publish_max_interval_s ({high}) must be >= publish_min_interval_s "
                f"({low})"
            )

    def _check_privacy(self, where: str) -> None:
        """Types, ranges and the all-or-none rule of the differential-privacy keys."""
        for key in _PRIVACY_KEYS:
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, _check_kind(where, key, value))
        given = [key for key in _BUDGET_KEYS if getattr(self, key) is not None]
        if given and len(given) < len(_BUDGET_KEYS):
            missing = next(key for key in _BUDGET_KEYS if getattr(self, key) is None)
            raise TopologyError(
                f"{where}: {missing} is missing: privacy needs epsilon, delta and clip_norm "
                f"together (got only {' and '.join(given)})"
            )
        if not given:
            for key in ("chunk_size", "noise_seed", "mechanism", "release_horizon"):
                if getattr(self, key) is not None:
                    raise TopologyError(
                        f"{where}: {key} is only used with privacy "
                        "(set epsilon, delta and clip_norm too)"
                    )
            return
        assert self.epsilon is not None and self.delta is not None and self.clip_norm is not None
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise TopologyError(f"{where}: epsilon must be a finite number > 0, got {self.epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise TopologyError(f"{where}: delta must be in (0, 1), got {self.delta}")
        if not (math.isfinite(self.clip_norm) and self.clip_norm > 0):
            raise TopologyError(
                f"{where}: clip_norm must be a finite number > 0 (in the readings' units), "
                f"got {self.clip_norm}"
            )
        if self.chunk_size is not None and self.chunk_size < 1:
            raise TopologyError(f"{where}: chunk_size must be >= 1, got {self.chunk_size}")
        if self.noise_seed is not None and self.noise_seed < 0:
            raise TopologyError(f"{where}: noise_seed must be >= 0, got {self.noise_seed}")
        if self.center:
            raise TopologyError(
                f"{where}: center = true cannot be combined with privacy (epsilon, delta, "
                "clip_norm): the mean would be published without noise"
            )
        self._check_mechanism(where)

    def _check_mechanism(self, where: str) -> None:
        """``mechanism`` (default "gaussian") and the keys that only one mechanism uses."""
        mechanism = MECHANISMS[0] if self.mechanism is None else self.mechanism
        if mechanism == FEDPOWER_MECHANISM:  # set by a FedPower `Topology` for its leaves
            for key in ("chunk_size", "release_horizon"):
                if getattr(self, key) is not None:
                    raise TopologyError(
                        f"{where}: {key} is not used with mechanism {FEDPOWER_MECHANISM!r}"
                    )
            return
        if mechanism not in MECHANISMS:
            raise TopologyError(
                f"{where}: mechanism must be one of {', '.join(map(repr, MECHANISMS))}, "
                f"got {mechanism!r}"
            )
        object.__setattr__(self, "mechanism", mechanism)
        if mechanism != "gaussian":
            if self.release_horizon is not None:
                raise TopologyError(
                    f"{where}: release_horizon is only used with mechanism 'gaussian', got "
                    f"release_horizon = {self.release_horizon} with mechanism {mechanism!r}"
                )
            return
        if self.chunk_size is not None:
            raise TopologyError(
                f"{where}: chunk_size is only used with mechanism 'fpca-eq8', got "
                f"chunk_size = {self.chunk_size} with mechanism 'gaussian'"
            )
        horizon = self.release_horizon
        if horizon is None:
            horizon = 1 if self.forget < 1.0 else DEFAULT_RELEASE_HORIZON
        if not 1 <= horizon <= MAX_HORIZON:
            raise TopologyError(
                f"{where}: release_horizon must be in [1, {MAX_HORIZON}], got {horizon}"
            )
        if horizon != 1 and self.forget < 1.0:
            raise TopologyError(
                f"{where}: release_horizon = {horizon} needs forget = 1, got forget = "
                f"{self.forget} (use release_horizon = 1 with a forgetting factor)"
            )
        object.__setattr__(self, "release_horizon", horizon)


def _fedpower_private_leaf(node_id: str, node: NodeConfig, config: FedPowerConfig) -> NodeConfig:
    """A private leaf of a FedPower topology, with mechanism `FEDPOWER_MECHANISM`.

    Raises
    ------
    TopologyError
        One line: the schedule is unbounded (``fedpower_rounds = 0``), or the leaf names an
        FPCA mechanism or an FPCA-only key (``chunk_size``, ``forget``, ``center``).
    """
    where = f"leaf {node_id!r}"
    if config.rounds == 0:
        raise TopologyError(
            f'{where}: differential privacy with algorithm = "fedpower" needs a bounded '
            "schedule (fedpower_rounds > 0): the budget covers a known number of local "
            "iterations"
        )
    if node.mechanism not in (None, MECHANISMS[0], FEDPOWER_MECHANISM):
        raise TopologyError(
            f"{where}: mechanism {node.mechanism!r} is FPCA's; a FedPower leaf uses "
            f"{FEDPOWER_MECHANISM!r} (leave mechanism unset)"
        )
    if node.chunk_size is not None or node.forget != 1.0:
        key = "chunk_size" if node.chunk_size is not None else "forget"
        raise TopologyError(f"{where}: {key} is not used by a private FedPower leaf; remove it")
    return replace(node, mechanism=FEDPOWER_MECHANISM, release_horizon=None)


@dataclass(frozen=True)
class FedPowerConfig:
    """The round settings of a FedPower deployment (top-level ``fedpower_*`` keys).

    Defaults are chosen for a streaming deployment of a few to a few hundred leaves and
    measured on Motes light (topologies/README.md gives the reasons).

    Parameters
    ----------
    local_steps : int, default 4
        ``p``: local power iterations of the first round (`edge_runtime.fedpower.Schedule`).
    decay : {"exponential", "linear", "none"}, default "exponential"
        How ``p`` shrinks after each round; ``"exponential"`` halves it down to 1, so the
        estimate ends in the exact (centralised) power method, with no heterogeneity floor.
    rounds : int, default 0
        Rounds after which the root stops starting new ones; 0: open-ended (streaming).
        Private leaves need it > 0: their budget covers `total_iterations` local iterations.
    quorum : int or float, default 0
        ``K``: replies that close a round early. An integer ``K >= 1`` (at most the number
        of leaves), a fraction in (0, 1) of the leaves (rounded up), or 0: all leaves.
    round_timeout_s : float, default 5
        A round closes at the latest this long after it started, with the replies it has.
    round_interval_s : float, default 0.1
        Least time between the close of a round and the start of the next.
    idle_interval_s : float, default 5
        Time between rounds once the estimate settled (the last round moved the basis by
        less than ``tolerance_rad`` and no participant saw new readings).
    opt : bool, default True
        Align the replies by Orthogonal Procrustes (OPT) before averaging.
    tolerance_rad : float, default 1e-3
        Largest principal angle between two consecutive global bases below which the
        estimate counts as settled (the idle cadence above; ``edge-runtime run`` stops).
    seed : int, default 0
        Seed of the initial basis ``Z_0`` (a QR of a Gaussian ``(d, r)`` matrix), which
        every leaf derives identically before the root knows ``d``.

    Raises
    ------
    TopologyError
        One line naming a bad value.
    """

    local_steps: int = 4
    decay: str = "exponential"
    rounds: int = 0
    quorum: int | float = 0
    round_timeout_s: float = 5.0
    round_interval_s: float = 0.1
    idle_interval_s: float = 5.0
    opt: bool = True
    tolerance_rad: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        where = "topology"
        for key in ("local_steps", "rounds", "seed"):
            value = _check_kind(where, f"fedpower_{key}", getattr(self, key))
            low = 1 if key == "local_steps" else 0
            if value < low:  # type: ignore[operator]
                raise TopologyError(f"{where}: fedpower_{key} must be >= {low}, got {value}")
        for key in ("round_timeout_s", "round_interval_s", "idle_interval_s", "tolerance_rad"):
            value = _check_kind(where, f"fedpower_{key}", getattr(self, key))
            positive = key == "round_timeout_s"
            if not math.isfinite(value) or value < 0 or (positive and value == 0):  # type: ignore[arg-type]
                bound = "> 0" if positive else ">= 0"
                raise TopologyError(
                    f"{where}: fedpower_{key} must be a finite number {bound}, got {value}"
                )
            object.__setattr__(self, key, value)
        _check_kind(where, "fedpower_opt", self.opt)
        _check_kind(where, "fedpower_decay", self.decay)
        if self.decay not in ("exponential", "linear", "none"):
            raise TopologyError(
                f"{where}: fedpower_decay must be 'exponential', 'linear' or 'none', "
                f"got {self.decay!r}"
            )
        q = self.quorum
        if isinstance(q, bool) or not _is_number(q):
            raise TopologyError(
                f"{where}: fedpower_quorum must be an integer >= 0 or a fraction in (0, 1), "
                f"got {_toml_type(q)} {_toml_repr(q)}"
            )
        if isinstance(q, float) and not (0.0 < q < 1.0):
            raise TopologyError(
                f"{where}: fedpower_quorum must be an integer >= 0 or a fraction in (0, 1), got {q}"
            )
        if isinstance(q, int) and q < 0:
            raise TopologyError(f"{where}: fedpower_quorum must be >= 0, got {q}")

    @property
    def total_iterations(self) -> int | None:
        """``T``: local iterations of all ``rounds`` rounds (what a private leaf's budget
        covers), or None when the schedule is open-ended (``rounds = 0``)."""
        if self.rounds == 0:
            return None
        decay = None if self.decay == "none" else self.decay
        schedule = Schedule(self.local_steps, decay=decay)
        return sum(schedule.local_steps(k) for k in range(1, self.rounds + 1))

    def quorum_of(self, n_leaves: int) -> int:
        """``K`` for ``n_leaves`` leaves: 0 means all, a fraction is rounded up."""
        q = self.quorum
        if isinstance(q, float):
            return max(1, math.ceil(q * n_leaves))
        return n_leaves if q == 0 else int(q)


@dataclass(frozen=True)
class Topology:
    """A validated aggregation tree with its topic names and dataset split.

    Parameters
    ----------
    name : str
        Name of the deployment (for logs and summaries).
    prefix : str
        Topic prefix, e.g. ``"fpca"``: no ``+``/``#``/NUL, no leading/trailing ``/``, no empty
        level, not starting with ``$``.
    nodes : Mapping[str, NodeConfig]
        Every node by id, in file order (kept as a read-only mapping).
    root : str
        Id of the one node without a parent.
    dataset : str or None, default None
        Built-in dataset name or a file path (relative to ``source_path``'s folder), or None.
    split : str, default "contiguous"
        One of `SPLITS`, see `split_rows`.
    source_path : Path or None, default None
        The TOML file this came from, if any.
    algorithm : {"fpca", "fedpower"}, default "fpca"
        The federated algorithm (`ALGORITHMS`): FPCA's asynchronous merges, or FedPower's
        rounds of local power iterations (the root is the server).
    fedpower : FedPowerConfig, default FedPowerConfig()
        The round settings when ``algorithm = "fedpower"`` (ignored otherwise).

    Raises
    ------
    TopologyError
        If the nodes do not form one tree rooted at ``root`` with at least one leaf, a leaf has
        no sensor topic or an aggregator has one, an aggregator has a privacy setting, two
        leaves share a ``noise_seed``, or another field is invalid.
    """

    name: str
    prefix: str
    nodes: Mapping[str, NodeConfig]
    root: str
    dataset: str | None = None
    split: str = "contiguous"
    source_path: Path | None = None
    algorithm: str = "fpca"
    fedpower: FedPowerConfig = field(default_factory=FedPowerConfig)
    _children: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _paths: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name == "":
            raise TopologyError(f"name must be a non-empty string, got {self.name!r}")
        _check_kind("topology", "prefix", self.prefix)
        problem = _prefix_problem(self.prefix)
        if problem is not None:
            raise TopologyError(f"prefix {self.prefix!r} is not a valid topic prefix: it {problem}")
        if self.split not in SPLITS:
            raise TopologyError(
                f"split must be one of {', '.join(map(repr, SPLITS))}, got {self.split!r}"
            )
        if self.algorithm not in ALGORITHMS:
            raise TopologyError(
                f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
                f"got {self.algorithm!r}"
            )
        if not isinstance(self.fedpower, FedPowerConfig):
            raise TopologyError(f"fedpower must be a FedPowerConfig, got {self.fedpower!r}")
        if self.dataset is not None and (not isinstance(self.dataset, str) or not self.dataset):
            raise TopologyError(f"dataset must be a non-empty string, got {self.dataset!r}")
        nodes = dict(self.nodes)
        for key, node in nodes.items():
            if not isinstance(node, NodeConfig) or node.id != key:
                raise TopologyError(f"nodes[{key!r}] must be a NodeConfig with id {key!r}")
        parents = {node_id: node.parent for node_id, node in nodes.items()}
        root = _check_tree(parents)
        if root != self.root:
            raise TopologyError(f"root is {self.root!r}, but the node without a parent is {root!r}")
        children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
        for node_id, parent in parents.items():
            if parent is not None:
                children[parent].append(node_id)
        for node_id, node in nodes.items():
            if children[node_id] and node.sensor_topic is not None:
                raise TopologyError(
                    f"node {node_id!r} has children, so it is an aggregator and must not have "
                    f"a sensor_topic (got {node.sensor_topic!r})"
                )
            if not children[node_id] and node.sensor_topic is None:
                raise TopologyError(f"leaf {node_id!r} has no sensor_topic")
            if children[node_id] and node.source is not None:
                raise TopologyError(_aggregator_source_message(node_id))
            if children[node_id]:
                for key in _PRIVACY_KEYS:
                    if getattr(node, key) is not None:
                        raise TopologyError(_aggregator_privacy_message(node_id, key))
                for key in _SENSOR_KEYS:
                    if getattr(node, key) != _BUILTIN_DEFAULTS[key]:
                        raise TopologyError(_aggregator_sensor_message(node_id, key))
        n_leaves = sum(1 for node_id in nodes if not children[node_id])
        for node_id, node in nodes.items():
            if node.score != "off" and (children[node_id] or self.algorithm != "fpca"):
                what = "an aggregator" if children[node_id] else f"a {self.algorithm} leaf"
                raise TopologyError(
                    f"node {node_id!r}: score = {node.score!r} is not supported on {what} "
                    "(FPCA leaves only)"
                )
        if self.algorithm != "fedpower":
            for node_id, node in nodes.items():
                if node.mechanism == FEDPOWER_MECHANISM:
                    raise TopologyError(
                        f"leaf {node_id!r}: mechanism {FEDPOWER_MECHANISM!r} needs "
                        'algorithm = "fedpower"'
                    )
        if self.algorithm == "fedpower":
            for node_id, node in nodes.items():
                if node.epsilon is not None:
                    nodes[node_id] = _fedpower_private_leaf(node_id, node, self.fedpower)
            q = self.fedpower.quorum
            if isinstance(q, int) and q > n_leaves:
                raise TopologyError(
                    f"topology: fedpower_quorum {q} exceeds the number of leaves {n_leaves}"
                )
        seeds: dict[int, str] = {}
        for node_id, node in nodes.items():
            if node.noise_seed is None:
                continue
            if node.noise_seed in seeds:
                raise TopologyError(
                    f"nodes {seeds[node.noise_seed]!r} and {node_id!r} share noise_seed "
                    f"{node.noise_seed}: their noise would cancel in the difference of their "
                    "snapshots; give each leaf its own seed"
                )
            seeds[node.noise_seed] = node_id
        paths: dict[str, str] = {}
        for node_id in nodes:  # parents are known and acyclic, so each walk ends at the root
            chain = [node_id]
            for _ in range(len(nodes)):
                parent = parents[chain[-1]]
                if parent is None:
                    break
                chain.append(parent)
            paths[node_id] = "/".join(reversed(chain))
        object.__setattr__(self, "nodes", MappingProxyType(nodes))
        object.__setattr__(
            self, "_children", MappingProxyType({k: tuple(v) for k, v in children.items()})
        )
        object.__setattr__(self, "_paths", MappingProxyType(paths))
        if self.source_path is not None:
            object.__setattr__(self, "source_path", Path(self.source_path))

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                self.prefix,
                tuple(self.nodes.values()),
                self.root,
                self.dataset,
                self.split,
                self.source_path,
                self.algorithm,
                self.fedpower,
            )
        )

    # -- tree -------------------------------------------------------------------------------

    def _node(self, node_id: str) -> NodeConfig:
        try:
            return self.nodes[node_id]
        except (KeyError, TypeError):
            known = list(self.nodes)
            shown = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
            raise TopologyError(
                f"unknown node {node_id!r} in topology {self.name!r} (nodes: {shown})"
            ) from None

    def children(self, node_id: str) -> list[str]:
        """Ids of the children of ``node_id``, in file order (empty for a leaf)."""
        self._node(node_id)
        return list(self._children[node_id])

    def is_leaf(self, node_id: str) -> bool:
        """Whether ``node_id`` has no children (and so reads sensors and runs FPCA-Edge)."""
        self._node(node_id)
        return not self._children[node_id]

    def leaves(self) -> list[str]:
        """Ids of all leaves, in file order."""
        return [node_id for node_id, kids in self._children.items() if not kids]

    def aggregators(self) -> list[str]:
        """Ids of all nodes with children (the root included), in file order."""
        return [node_id for node_id, kids in self._children.items() if kids]

    def leaves_under(self, node_id: str) -> list[str]:
        """Leaves in the subtree of ``node_id``, in file order (``[node_id]`` for a leaf)."""
        prefix = self.path(node_id)
        return [
            leaf
            for leaf in self.leaves()
            if self._paths[leaf] == prefix or self._paths[leaf].startswith(prefix + "/")
        ]

    def reading_norm_sq_bound(self, node_id: str, n_features: int) -> float | None:
        """Largest squared Euclidean norm of one reading of ``n_features`` values that any
        leaf under ``node_id`` (the node itself for a leaf) passes to its estimator: the
        maximum over those leaves of `NodeConfig.reading_norm_sq_bound`, ``sum_j
        max(lo_j**2, hi_j**2)`` of its ``valid_range``. None if one of them declares no
        range, or per-feature bounds of another width.

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        ValueError
            If ``n_features < 1``.
        """
        bounds = [
            self.nodes[leaf].reading_norm_sq_bound(n_features)
            for leaf in self.leaves_under(node_id)
        ]
        if any(bound is None for bound in bounds):
            return None
        return max(bounds)  # type: ignore[type-var]

    def max_reading_rate(self, node_id: str) -> float | None:
        """Readings per second the leaves under ``node_id`` (the node itself for a leaf) can
        produce at most: the sum of their declared ``max_reading_rate``; None if one of them
        declares none.

        Raises
        ------
        TopologyError
            If ``node_id`` is not a node.
        """
        rates = [self.nodes[leaf].max_reading_rate for leaf in self.leaves_under(node_id)]
        if any(rate is None for rate in rates):
            return None
        return float(sum(rates))  # type: ignore[arg-type]

    def path(self, node_id: str) -> str:
        """The chain of ids from the root to ``node_id``, e.g. ``"root/site-a/pi-01"``."""
        self._node(node_id)
        return self._paths[node_id]

    # -- topics -----------------------------------------------------------------------------

    def subspace_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/subspace``: the node's latest snapshot (retained, QoS 1)."""
        return f"{self.prefix}/{self.path(node_id)}/subspace"

    def status_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/status``: ``online`` / ``offline`` (retained, Last Will)."""
        return f"{self.prefix}/{self.path(node_id)}/status"

    def status_detail_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/status/detail``: the JSON status document (retained)."""
        return f"{self.prefix}/{self.path(node_id)}/status/detail"

    def scores_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/scores``: a scoring leaf's anomaly scores (JSON, not retained;
        `edge_runtime.agents.scoring_core`)."""
        return f"{self.prefix}/{self.path(node_id)}/scores"

    def confirm_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/confirm``: a leaf's reading confirmations (JSON, retained).

        Maps each sensor source to the last sequence number the leaf ingested and the last
        one that is durable (see `edge_runtime.wire.ConfirmMessage`).
        """
        return f"{self.prefix}/{self.path(node_id)}/confirm"

    def model_topic(self) -> str:
        """``<prefix>/<root>/model``: the global estimate (retained)."""
        return f"{self.prefix}/{self.path(self.root)}/model"

    def round_topic(self) -> str:
        """``<prefix>/<root>/round``: FedPower's round message from the root (retained)."""
        return f"{self.prefix}/{self.path(self.root)}/round"

    def reply_topic(self, node_id: str) -> str:
        """``<prefix>/<path>/reply``: a FedPower leaf's reply to a round (not retained)."""
        return f"{self.prefix}/{self.path(node_id)}/reply"

    def children_filter(self, node_id: str) -> str:
        """``<prefix>/<path>/+/subspace``: the filter matching the snapshots of the children.

        Defined for leaves too (it then matches nothing the topology publishes).
        """
        return f"{self.prefix}/{self.path(node_id)}/+/subspace"

    # -- data -------------------------------------------------------------------------------

    def split_rows(self, n_rows: int) -> dict[str, np.ndarray]:
        """Deal rows ``0 .. n_rows-1`` of a dataset to the leaves; every row exactly once.

        ``"contiguous"``: leaf ``i`` (file order) gets one contiguous range, the ranges in leaf
        order, of ``n_rows * share_i / sum(shares)`` rows rounded by the largest-remainder
        method (exact rational arithmetic; ties go to the earlier leaf), so each count is within
        1 of its exact quota. ``"round-robin"``: row ``j`` goes to leaf ``j % n_leaves``; shares
        are ignored. With fewer rows than leaves some leaves get none.

        Parameters
        ----------
        n_rows : int
            Number of rows (samples) in the dataset, >= 0.

        Returns
        -------
        dict of leaf id -> ndarray of shape (n_leaf_rows,), int64
            Increasing row indices, keys in leaf file order.

        Raises
        ------
        ValueError
            If ``n_rows`` is not a non-negative integer.
        """
        if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer) or n_rows < 0:
            raise ValueError(f"n_rows must be a non-negative integer, got {n_rows!r}")
        n_rows = int(n_rows)
        leaves = self.leaves()
        if self.split == "round-robin":
            k = len(leaves)
            return {leaf: np.arange(i, n_rows, k, dtype=np.int64) for i, leaf in enumerate(leaves)}
        shares = [Fraction(self.nodes[leaf].share) for leaf in leaves]
        total = sum(shares, Fraction(0))
        quotas = [n_rows * share / total for share in shares]
        counts = [math.floor(quota) for quota in quotas]
        remaining = n_rows - sum(counts)  # 0 <= remaining < len(leaves)
        by_remainder = sorted(range(len(leaves)), key=lambda i: (-(quotas[i] - counts[i]), i))
        for i in by_remainder[:remaining]:
            counts[i] += 1
        result: dict[str, np.ndarray] = {}
        start = 0
        for leaf, count in zip(leaves, counts, strict=True):
            result[leaf] = np.arange(start, start + count, dtype=np.int64)
            start += count
        return result

    def dataset_path(self) -> Path | None:
        """The file of the configured dataset, or ``None`` if there is no ``dataset``.

        A built-in name (see `edge_runtime.datasets.BUILTIN_DATASETS`; it wins over a file of the
        same name) gives the file shipped in the package. Otherwise ``~`` is expanded and a
        relative path is taken relative to the TOML file's folder (the working directory when
        the topology was parsed from a string). The file's existence is not checked here.
        `edge_runtime.datasets.load_dataset` accepts the result in every case.
        """
        if self.dataset is None:
            return None
        if self.dataset in BUILTIN_DATASETS:
            return builtin_dataset_path(self.dataset)
        path = Path(self.dataset).expanduser()
        if not path.is_absolute() and self.source_path is not None:
            path = self.source_path.parent / path
        return path


def _aggregator_privacy_message(node_id: str, key: str) -> str:
    return (
        f"node {node_id!r} has children, so it is an aggregator: {key} applies to leaves only "
        "(an aggregator reports the weakest guarantee of its children)"
    )


# --------------------------------------------------------------------------------------------
# Tree validation


def _check_tree(parents: Mapping[str, str | None]) -> str:
    """Check that ``parents`` (id -> parent id) is one tree with children; return the root.

    Raises TopologyError for: no nodes, an unknown parent, zero or several roots, a cycle, or a
    root without children.
    """
    if not parents:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    for node_id, parent in parents.items():
        if parent is not None and parent not in parents:
            close = difflib.get_close_matches(parent, list(parents), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TopologyError(f"node {node_id!r} has unknown parent {parent!r}{hint}")
    roots = [node_id for node_id, parent in parents.items() if parent is None]
    if not roots:
        cycle = _find_cycle(parents, next(iter(parents)))
        raise TopologyError(
            f"no root: every node has a parent, e.g. the cycle {_cycle_text(cycle)}; "
            "exactly one node must omit 'parent'"
        )
    if len(roots) > 1:
        names = ", ".join(repr(r) for r in roots[:-1]) + f" and {roots[-1]!r}"
        raise TopologyError(f"{len(roots)} roots {names}: exactly one node may omit 'parent'")
    root = roots[0]
    reaches_root = {root}
    for node_id in parents:
        if node_id not in reaches_root:
            chain = _walk_up(parents, node_id, reaches_root)
            if chain is None:
                raise TopologyError(
                    f"node {node_id!r} is on or under a parent cycle: "
                    f"{_cycle_text(_find_cycle(parents, node_id))}"
                )
            reaches_root.update(chain)
    if all(parent != root for parent in parents.values()):
        raise TopologyError(
            f"root {root!r} has no children: a topology needs at least one leaf under its root"
        )
    return root


def _walk_up(
    parents: Mapping[str, str | None], start: str, reaches_root: set[str]
) -> list[str] | None:
    """The chain from ``start`` up to a node known to reach the root, or None on a cycle."""
    chain = [start]
    for _ in range(len(parents)):
        parent = parents[chain[-1]]
        if parent is None or parent in reaches_root:
            return chain
        if parent in chain:
            return None
        chain.append(parent)
    return None


def _find_cycle(parents: Mapping[str, str | None], start: str) -> list[str]:
    """The cycle reached by walking up from ``start`` (each id's parent is the next one)."""
    seen: dict[str, int] = {}
    chain: list[str] = []
    node: str | None = start
    for _ in range(len(parents) + 1):
        if node is None:
            break
        if node in seen:
            return chain[seen[node] :]
        seen[node] = len(chain)
        chain.append(node)
        node = parents[node]
    raise AssertionError(f"no parent cycle above {start!r}")  # callers guarantee one exists


def _cycle_text(cycle: list[str]) -> str:
    return " -> ".join(repr(node_id) for node_id in [*cycle, cycle[0]]) + " (child -> parent)"


# --------------------------------------------------------------------------------------------
# Parsing


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Read and validate a topology TOML file.

    Parameters
    ----------
    path : str or path-like
        The TOML file (format: ``topologies/README.md``).

    Returns
    -------
    Topology
        With ``source_path`` set to ``path``; a relative ``dataset`` is relative to its folder.

    Raises
    ------
    TopologyError
        If the file is missing, unreadable, not UTF-8, not valid TOML (the message gives the
        file, line and column), or does not describe a valid topology.
    """
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TopologyError(f"topology file not found: {str(path)!r}") from None
    except IsADirectoryError:
        raise TopologyError(
            f"topology path {str(path)!r} is a directory, expected a file"
        ) from None
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {str(path)!r}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_topology(text, source_path=path)


def parse_topology(text: str, source_path: str | os.PathLike[str] | None = None) -> Topology:
    """Parse and validate a topology from TOML text.

    Parameters
    ----------
    text : str
        TOML in the format of ``topologies/README.md``.
    source_path : str or path-like, optional
        Where the text came from: named in error messages, the default ``name`` (its stem) and
        the folder a relative ``dataset`` is resolved against.

    Returns
    -------
    Topology

    Raises
    ------
    TopologyError
        One line, prefixed with ``source_path`` when given: TOML syntax errors (with line and
        column), unknown keys, wrong TOML types, out-of-range values, invalid ids, duplicate
        ids, unknown parents, zero or several roots, cycles, a root without children, an
        aggregator with a ``sensor_topic``, a privacy key or a sensor key (``valid_range``,
        ``out_of_range``, ``max_reading_rate``), privacy keys without all of
        ``epsilon``, ``delta`` and ``clip_norm``, an unknown ``mechanism``, ``chunk_size``
        without mechanism ``"fpca-eq8"``, ``release_horizon`` without mechanism
        ``"gaussian"``, outside ``[1, 4096]`` or above 1 with ``forget < 1``, two leaves
        sharing a ``noise_seed``, an unknown split.
    """
    source = Path(source_path) if source_path is not None else None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(_syntax_message(exc, text, source)) from None
    try:
        return _build(document, source)
    except TopologyError as exc:
        if source is None:
            raise
        raise TopologyError(f"{source}: {exc}") from None


def _syntax_message(exc: tomllib.TOMLDecodeError, text: str, source: Path | None) -> str:
    """One line: file, line and column of a TOML syntax error."""
    message = str(exc)
    where = str(source) if source is not None else "<string>"
    match = _TOML_POSITION.match(message)
    if match:
        line, col = int(match["line"]), int(match["col"])
        return f"{where}: TOML syntax error at line {line}, column {col}: {match['msg']}"
    match = _TOML_AT_END.match(message)
    if match:
        lines = text.split("\n")
        line, col = len(lines), len(lines[-1]) + 1
        return (
            f"{where}: TOML syntax error at line {line}, column {col} (end of file): {match['msg']}"
        )
    return f"{where}: TOML syntax error: {message}"


def _build(document: dict[str, Any], source: Path | None) -> Topology:
    _check_keys("topology", document, _TOP_LEVEL_KEYS)

    name = _check_kind(
        "topology", "name", document.get("name", source.stem if source else "topology")
    )
    if name == "":
        raise TopologyError('topology: name must be a non-empty string (set name = "...")')
    prefix = _check_kind("topology", "prefix", document.get("prefix", DEFAULT_PREFIX))
    algorithm = _check_kind("topology", "algorithm", document.get("algorithm", "fpca"))
    if algorithm not in ALGORITHMS:
        raise TopologyError(
            f"topology: unknown algorithm {algorithm!r}, expected one of: "
            f"{', '.join(map(repr, ALGORITHMS))}"
        )
    fedpower_keys = {k: document[k] for k in _FEDPOWER_KEYS if k in document}
    if fedpower_keys and algorithm != "fedpower":
        key = next(iter(fedpower_keys))
        raise TopologyError(f'topology: {key} needs algorithm = "fedpower"')
    fedpower = FedPowerConfig(**{k.removeprefix("fedpower_"): v for k, v in fedpower_keys.items()})

    defaults = _table(document, "defaults")
    _check_defaults_keys(defaults)
    defaults = {k: _check_kind("[defaults]", k, v) for k, v in defaults.items()}

    data = _table(document, "data")
    _check_keys("[data]", data, _DATA_KEYS)
    dataset = data.get("dataset")
    if dataset is not None:
        dataset = _check_kind("[data]", "dataset", dataset)
        if dataset == "":
            raise TopologyError("[data]: dataset must be a built-in name or a path, got ''")
    split = _check_kind("[data]", "split", data.get("split", "contiguous"))
    if split not in SPLITS:
        raise TopologyError(
            f"[data]: unknown split {split!r}, expected one of: {', '.join(map(repr, SPLITS))}"
        )

    raw_nodes = _raw_nodes(document)
    parents = {node_id: raw.get("parent") for node_id, raw in raw_nodes.items()}
    root = _check_tree(parents)
    has_children = {parent for parent in parents.values() if parent is not None}

    nodes: dict[str, NodeConfig] = {}
    for node_id, raw in raw_nodes.items():
        settings = {**_BUILTIN_DEFAULTS, **defaults, **raw}
        if "rank" not in settings:
            raise TopologyError(f"node {node_id!r}: no rank; set rank in [defaults] or on the node")
        if node_id in has_children:
            if "source" in raw:
                raise TopologyError(_aggregator_source_message(node_id))
            if "sensor_topic" in raw:
                raise TopologyError(
                    f"node {node_id!r} has children, so it is an aggregator and must not have "
                    f"a sensor_topic (got {raw['sensor_topic']!r})"
                )
            settings["sensor_topic"] = None
            for key in _PRIVACY_KEYS:  # [defaults] privacy settings are the leaves'
                if key in raw:
                    raise TopologyError(_aggregator_privacy_message(node_id, key))
                settings[key] = None
            for key in _SCORE_KEYS:  # [defaults] scoring settings are the leaves' too
                if key in raw:
                    raise TopologyError(
                        f"node {node_id!r} has children, so it is an aggregator and does not "
                        f"score readings: remove {key}"
                    )
                settings[key] = _BUILTIN_DEFAULTS[key]
            for key in _SENSOR_KEYS:  # and so are [defaults] sensor ranges
                if key in raw:
                    raise TopologyError(_aggregator_sensor_message(node_id, key))
                settings[key] = _BUILTIN_DEFAULTS[key]
        else:
            if "source" in raw:
                _leaf_source(node_id, raw, settings, source)
            settings.setdefault("sensor_topic", _DEFAULT_SENSOR_TOPIC.format(id=node_id))
        settings["parent"] = raw.get("parent")
        nodes[node_id] = NodeConfig(**settings)

    return Topology(
        name=name,
        prefix=prefix,
        nodes=nodes,
        root=root,
        dataset=dataset,
        split=split,
        source_path=source,
        algorithm=algorithm,
        fedpower=fedpower,
    )


def _aggregator_sensor_message(node_id: str, key: str) -> str:
    return (
        f"node {node_id!r} has children, so it is an aggregator and reads no sensor: "
        f"remove {key} (a leaf's setting)"
    )


def _aggregator_source_message(node_id: str) -> str:
    return (
        f"node {node_id!r} has children, so it is an aggregator and must not have a source "
        "(only leaves read sensor readings)"
    )


def _leaf_source(
    node_id: str, raw: Mapping[str, Any], settings: dict[str, Any], file: Path | None
) -> None:
    """Validate leaf ``node_id``'s ``source`` table into ``settings``: a local spec goes to
    ``settings["source"]``; an mqtt spec sets ``sensor_topic`` (when it names a topic)."""
    where = f"node {node_id!r}"
    base_dir = None if file is None else file.parent
    try:
        spec = SourceSpec.from_mapping(raw["source"], where, base_dir=base_dir)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    given_topic = raw.get("sensor_topic")
    if spec.is_local:
        if given_topic is not None:
            raise TopologyError(
                f"{where}: a source of kind {spec.kind!r} replaces sensor_topic "
                f"(got {given_topic!r}); remove one of them"
            )
        settings["source"] = spec
        return
    settings["source"] = None
    if spec.topic is not None:
        if given_topic is not None and given_topic != spec.topic:
            raise TopologyError(
                f"{where}: sensor_topic {given_topic!r} and source topic {spec.topic!r} "
                "differ; set one of them"
            )
        settings["sensor_topic"] = spec.topic


def _table(document: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise TopologyError(f"topology: {key} must be a table ([{key}]), got {_toml_type(value)}")
    return value


def _check_defaults_keys(defaults: Mapping[str, Any]) -> None:
    for key in defaults:
        if key in ("id", "parent", "sensor_topic"):
            raise TopologyError(f"[defaults]: {key} cannot have a default; set it on each node")
        if key == "source":
            raise TopologyError(
                "[defaults]: source cannot have a default (leaves sharing a file, port or "
                "command would count the same readings twice); set it on each leaf"
            )
        if key == "noise_seed":
            raise TopologyError(
                "[defaults]: noise_seed cannot have a default (leaves sharing a seed draw the "
                "same noise); set it on each leaf"
            )
        if key not in _DEFAULTABLE_KEYS:
            raise TopologyError(_unknown_key_message("[defaults]", key, _DEFAULTABLE_KEYS))


def _raw_nodes(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The [[nodes]] tables by id, in file order, with keys and TOML types checked."""
    tables = document.get("nodes")
    if tables is None:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise TopologyError(
            f"topology: nodes must be an array of tables ([[nodes]]), got {_toml_type(tables)}"
        )
    by_id: dict[str, dict[str, Any]] = {}
    index_of: dict[str, int] = {}
    for index, table in enumerate(tables):
        if "id" not in table:
            raise TopologyError(
                f"nodes[{index}] (the [[nodes]] table number {index + 1}) has no id"
            )
        node_id = table["id"]
        if not isinstance(node_id, str):
            raise TopologyError(
                f"nodes[{index}]: id must be a string, "
                f"got {_toml_type(node_id)} {_toml_repr(node_id)}"
            )
        _check_node_id(node_id, where=f"nodes[{index}]: ")
        where = f"node {node_id!r}"
        if node_id in by_id:
            raise TopologyError(
                f"duplicate node id {node_id!r} (nodes[{index_of[node_id]}] and nodes[{index}])"
            )
        _check_keys(where, table, _NODE_KEYS)
        by_id[node_id] = {
            k: v if k == "source" else _check_kind(where, k, v) for k, v in table.items()
        }
        index_of[node_id] = index
    if not by_id:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    return by_id
