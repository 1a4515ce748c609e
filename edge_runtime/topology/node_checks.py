"""The checks of one node's settings: types, ranges and the rules between keys.

`check_node` is `NodeConfig`'s ``__post_init__``: it checks every field of a freshly built
(frozen) node and normalises some in place (integers given for floats become floats, arrays
tuples, and the privacy defaults ``mechanism``, ``release_horizon`` and ``block_size`` are
filled in). The order of the checks fixes which message a node with several problems gets.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from edge_runtime.fedpower import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.fpca.continual import MAX_HORIZON
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.topology.checks import (
    TopologyError,
    check_kind,
    check_node_id,
    toml_repr,
    toml_type,
    topic_filter_problem,
)
from edge_runtime.topology.keys import (
    BUDGET_KEYS,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_RELEASE_HORIZON,
    OUT_OF_RANGE_MODES,
    PRIVACY_KEYS,
    PUBLISH_KEYS,
    SCORE_DETECTORS,
    SCORE_KEYS,
    SCORE_MODES,
    SECAGG_MECHANISM,
    STALE_POLICIES,
)

if TYPE_CHECKING:
    from edge_runtime.topology.node import NodeConfig

__all__ = ["MIN_SECAGG_SLOT_S", "check_node"]

MIN_SECAGG_SLOT_S = 2.0
"""Shortest ``secagg_slot_s``: a slot's phases get at most half of it
(`edge_runtime.topology.secagg.slot_timeouts`), and a phase needs a round trip through the
broker and a few milliseconds of X25519 and Shamir work on each leaf."""


def _is_local_spec(source: object) -> bool:
    """Whether ``source`` is a local `SourceSpec` (its module is imported here, for a node
    with a source: a leaf reading its sensor topic does not load the sources, issue 24)."""
    from edge_runtime.sources.spec import SourceSpec

    return isinstance(source, SourceSpec) and source.is_local


def _set(node: NodeConfig, key: str, value: object) -> None:
    """Normalise field ``key`` of the frozen ``node`` in place."""
    object.__setattr__(node, key, value)


def check_node(node: NodeConfig) -> None:
    """Check every field of ``node`` and normalise it in place (see the module docstring).

    Raises
    ------
    TopologyError
        One line naming the node (``"node '<id>': ..."``) for the first problem found: a
        wrong type, a value out of range, privacy keys without all of ``epsilon``, ``delta``
        and ``clip_norm``, a key of another mechanism, an invalid ``sensor_topic`` filter,
        a non-local ``source``, or scoring on a private leaf without
        ``score_allow_private``.
    """
    if not isinstance(node.id, str):
        raise TopologyError(
            f"node id must be a string, got {toml_type(node.id)} {toml_repr(node.id)}"
        )
    check_node_id(node.id)
    where = f"node {node.id!r}"
    if node.parent is not None:
        check_kind(where, "parent", node.parent)
    for key in ("rank", "adaptive", "holdoff", "center", "open"):
        check_kind(where, key, getattr(node, key))
    if node.block_size is not None:
        check_kind(where, "block_size", node.block_size)
    if node.oversample is not None:
        check_kind(where, "oversample", node.oversample)
        if node.oversample < 0:
            raise TopologyError(f"{where}: oversample must be >= 0, got {node.oversample}")
    check_kind(where, "stale_policy", node.stale_policy)
    if node.stale_policy not in STALE_POLICIES:
        raise TopologyError(
            f"{where}: stale_policy must be one of {', '.join(STALE_POLICIES)}, "
            f"got {node.stale_policy!r}"
        )
    for key in ("rank_bounds", "share", "forget", "stale_after_s"):
        _set(node, key, check_kind(where, key, getattr(node, key)))
    if node.rank < 1:
        raise TopologyError(f"{where}: rank must be >= 1, got {node.rank}")
    if node.block_size is not None and node.block_size < node.rank:
        raise TopologyError(
            f"{where}: block_size must be >= rank ({node.rank}), got {node.block_size}"
        )
    lower, upper = node.rank_bounds
    if not 0.0 < lower < upper < 1.0:
        raise TopologyError(
            f"{where}: rank_bounds must satisfy 0 < lower < upper < 1, got [{lower}, {upper}]"
        )
    if node.holdoff < 1:
        raise TopologyError(f"{where}: holdoff must be >= 1 block, got {node.holdoff}")
    _check_publish_policy(node, where)
    _set(node, "stale_weight", check_kind(where, "stale_weight", node.stale_weight))
    if not (math.isfinite(node.stale_after_s) and node.stale_after_s > 0):
        raise TopologyError(f"{where}: stale_after_s must be > 0 seconds, got {node.stale_after_s}")
    if not 0.0 < node.stale_weight < 1.0:
        raise TopologyError(f"{where}: stale_weight must be in (0, 1), got {node.stale_weight}")
    if not 0.0 < node.forget <= 1.0:
        raise TopologyError(f"{where}: forget must be in (0, 1], got {node.forget}")
    if not (math.isfinite(node.share) and node.share > 0):
        raise TopologyError(f"{where}: share must be a finite number > 0, got {node.share}")
    if node.sensor_topic is not None:
        check_kind(where, "sensor_topic", node.sensor_topic)
        problem = topic_filter_problem(node.sensor_topic)
        if problem is not None:
            raise TopologyError(
                f"{where}: sensor_topic {node.sensor_topic!r} is not a valid MQTT topic "
                f"filter: it {problem}"
            )
    if node.source is not None and not _is_local_spec(node.source):
        raise TopologyError(
            f"{where}: source must be a local SourceSpec (kind 'command', 'file' or "
            f"'serial'; an mqtt source is sensor_topic), got {node.source!r}"
        )
    _check_privacy(node, where)
    _check_secagg_keys(node, where)
    _check_scoring(node, where)
    _check_sensor_range(node, where)
    if node.block_size is None and node.mechanism != "gaussian":
        _set(node, "block_size", DEFAULT_BLOCK_SIZE)


def _check_secagg_keys(node: NodeConfig, where: str) -> None:
    """Types and ranges of a secure-aggregation site's keys (the tree checks the rest:
    `edge_runtime.topology.secagg`)."""
    if node.secagg_threshold is not None:
        check_kind(where, "secagg_threshold", node.secagg_threshold)
        if node.secagg_threshold < 2:
            raise TopologyError(
                f"{where}: secagg_threshold must be >= 2 (and above half the site's secagg "
                f"leaves), got {node.secagg_threshold}"
            )
    if node.secagg_slot_s is not None:
        slot = check_kind(where, "secagg_slot_s", node.secagg_slot_s)
        _set(node, "secagg_slot_s", slot)
        if not (math.isfinite(slot) and slot >= MIN_SECAGG_SLOT_S):  # type: ignore[arg-type]
            raise TopologyError(
                f"{where}: secagg_slot_s must be a finite number >= {MIN_SECAGG_SLOT_S} "
                f"seconds, got {slot}"
            )


def _check_scoring(node: NodeConfig, where: str) -> None:
    """Types and ranges of the anomaly-scoring keys (`SCORE_MODES`, `SCORE_DETECTORS`),
    and the privacy rule: a private leaf scores only with ``score_allow_private = true``."""
    for key in SCORE_KEYS:
        _set(node, key, check_kind(where, key, getattr(node, key)))
    if node.score not in SCORE_MODES:
        raise TopologyError(
            f"{where}: score must be one of {', '.join(map(repr, SCORE_MODES))}, got {node.score!r}"
        )
    if not (math.isfinite(node.score_interval_s) and node.score_interval_s > 0):
        raise TopologyError(
            f"{where}: score_interval_s must be > 0 seconds, got {node.score_interval_s}"
        )
    if not 0.0 < node.score_alpha < 1.0:
        raise TopologyError(f"{where}: score_alpha must be in (0, 1), got {node.score_alpha}")
    if node.score_detector not in SCORE_DETECTORS:
        raise TopologyError(
            f"{where}: score_detector must be one of {', '.join(map(repr, SCORE_DETECTORS))}, "
            f"got {node.score_detector!r}"
        )
    if node.score_warmup < 2:
        raise TopologyError(f"{where}: score_warmup must be >= 2 readings, got {node.score_warmup}")
    if node.score != "off" and node.epsilon is not None and not node.score_allow_private:
        raise TopologyError(
            f"{where}: score = {node.score!r} publishes a score of each reading of a private "
            "leaf, which the privacy guarantee does not cover; set score_allow_private = "
            "true to publish them anyway"
        )


def _check_sensor_range(node: NodeConfig, where: str) -> None:
    """Types and ranges of ``valid_range``, ``out_of_range`` and ``max_reading_rate``."""
    if node.valid_range is not None:
        valid_range = check_kind(where, "valid_range", node.valid_range)
        _set(node, "valid_range", valid_range)
        lo, hi = (np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in valid_range)  # type: ignore[union-attr]
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise TopologyError(
                f"{where}: valid_range must be finite numbers (the sensors' range from "
                f"their datasheet), got {toml_repr(valid_range)}"
            )
        bad = np.flatnonzero(lo >= hi)
        if bad.size:
            j = int(bad[0])
            at = f" for feature {j}" if lo.size > 1 else ""
            raise TopologyError(
                f"{where}: valid_range must have lo < hi{at}, got lo {lo[j]} and hi {hi[j]}"
            )
    check_kind(where, "out_of_range", node.out_of_range)
    if node.out_of_range not in OUT_OF_RANGE_MODES:
        raise TopologyError(
            f"{where}: out_of_range must be one of "
            f"{', '.join(map(repr, OUT_OF_RANGE_MODES))}, got {node.out_of_range!r}"
        )
    if node.out_of_range == "clip" and node.valid_range is None:
        raise TopologyError(
            f"{where}: out_of_range = 'clip' needs valid_range (the range to clip into)"
        )
    if node.max_reading_rate is not None:
        rate = check_kind(where, "max_reading_rate", node.max_reading_rate)
        _set(node, "max_reading_rate", rate)
        if not (math.isfinite(rate) and rate > 0):  # type: ignore[arg-type]
            raise TopologyError(
                f"{where}: max_reading_rate must be a finite number > 0 (readings per "
                f"second), got {rate}"
            )


def _check_publish_policy(node: NodeConfig, where: str) -> None:
    """Types and ranges of the flow-control keys (None: the role's default)."""
    for key in PUBLISH_KEYS:
        value = getattr(node, key)
        if value is None:
            continue
        value = check_kind(where, key, value)
        _set(node, key, value)
        positive = key in ("idle_flush_s", "publish_spectrum_change", "publish_growth")
        if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
            raise TopologyError(
                f"{where}: {key} must be a finite number {'> 0' if positive else '>= 0'}, "
                f"got {value}"
            )
    low, high = node.publish_min_interval_s, node.publish_max_interval_s
    if low is not None and high is not None and high < low:
        raise TopologyError(
            f"{where}: publish_max_interval_s ({high}) must be >= publish_min_interval_s ({low})"
        )


def _check_privacy(node: NodeConfig, where: str) -> None:
    """Types, ranges and the all-or-none rule of the differential-privacy keys."""
    for key in PRIVACY_KEYS:
        value = getattr(node, key)
        if value is not None:
            _set(node, key, check_kind(where, key, value))
    given = [key for key in BUDGET_KEYS if getattr(node, key) is not None]
    if given and len(given) < len(BUDGET_KEYS):
        missing = next(key for key in BUDGET_KEYS if getattr(node, key) is None)
        raise TopologyError(
            f"{where}: {missing} is missing: privacy needs epsilon, delta and clip_norm "
            f"together (got only {' and '.join(given)})"
        )
    if not given:
        for key in ("chunk_size", "noise_seed", "mechanism", "release_horizon"):
            if getattr(node, key) is not None:
                raise TopologyError(
                    f"{where}: {key} is only used with privacy "
                    "(set epsilon, delta and clip_norm too)"
                )
        return
    assert node.epsilon is not None and node.delta is not None and node.clip_norm is not None
    if not (math.isfinite(node.epsilon) and node.epsilon > 0):
        raise TopologyError(f"{where}: epsilon must be a finite number > 0, got {node.epsilon}")
    if not 0.0 < node.delta < 1.0:
        raise TopologyError(f"{where}: delta must be in (0, 1), got {node.delta}")
    if not (math.isfinite(node.clip_norm) and node.clip_norm > 0):
        raise TopologyError(
            f"{where}: clip_norm must be a finite number > 0 (in the readings' units), "
            f"got {node.clip_norm}"
        )
    if node.chunk_size is not None and node.chunk_size < 1:
        raise TopologyError(f"{where}: chunk_size must be >= 1, got {node.chunk_size}")
    if node.noise_seed is not None and node.noise_seed < 0:
        raise TopologyError(f"{where}: noise_seed must be >= 0, got {node.noise_seed}")
    if node.center:
        raise TopologyError(
            f"{where}: center = true cannot be combined with privacy (epsilon, delta, "
            "clip_norm): the mean would be published without noise"
        )
    _check_mechanism(node, where)


def _check_mechanism(node: NodeConfig, where: str) -> None:
    """``mechanism`` (default "gaussian") and the keys that only one mechanism uses."""
    mechanism = MECHANISMS[0] if node.mechanism is None else node.mechanism
    if mechanism == FEDPOWER_MECHANISM:  # set by a FedPower `Topology` for its leaves
        for key in ("chunk_size", "release_horizon"):
            if getattr(node, key) is not None:
                raise TopologyError(
                    f"{where}: {key} is not used with mechanism {FEDPOWER_MECHANISM!r}"
                )
        return
    if mechanism not in (*MECHANISMS, SECAGG_MECHANISM):
        names = ", ".join(map(repr, (*MECHANISMS, SECAGG_MECHANISM)))
        raise TopologyError(f"{where}: mechanism must be one of {names}, got {mechanism!r}")
    _set(node, "mechanism", mechanism)
    if mechanism not in ("gaussian", SECAGG_MECHANISM):
        if node.release_horizon is not None:
            raise TopologyError(
                f"{where}: release_horizon is only used with mechanism 'gaussian' or "
                f"{SECAGG_MECHANISM!r}, got "
                f"release_horizon = {node.release_horizon} with mechanism {mechanism!r}"
            )
        return
    if node.chunk_size is not None:
        raise TopologyError(
            f"{where}: chunk_size is only used with mechanism 'fpca-eq8', got "
            f"chunk_size = {node.chunk_size} with mechanism {mechanism!r}"
        )
    horizon = node.release_horizon
    if horizon is None:
        horizon = 1 if node.forget < 1.0 else DEFAULT_RELEASE_HORIZON
    if not 1 <= horizon <= MAX_HORIZON:
        raise TopologyError(
            f"{where}: release_horizon must be in [1, {MAX_HORIZON}], got {horizon}"
        )
    if horizon != 1 and node.forget < 1.0:
        raise TopologyError(
            f"{where}: release_horizon = {horizon} needs forget = 1, got forget = "
            f"{node.forget} (use release_horizon = 1 with a forgetting factor)"
        )
    _set(node, "release_horizon", horizon)
