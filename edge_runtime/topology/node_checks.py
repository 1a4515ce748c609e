"""The checks of one node's settings: each key's kind and range, and the rules between keys.

`check_node` is how a `NodeConfig` is built: it checks the given values (each key against
its declaration in `edge_runtime.topology.keys`, then the rules between keys) and returns
them normalised (integers given for floats become floats, arrays tuples, and the privacy
defaults ``mechanism``, ``release_horizon`` and ``block_size`` are filled in); the frozen
node is constructed from what it returns. The order of the checks fixes which message a node
with several problems gets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_runtime.declaration import type_name, value_text
from edge_runtime.fedpower import MECHANISM as FEDPOWER_MECHANISM
from edge_runtime.fpca.privacy import MECHANISMS
from edge_runtime.topology.checks import (
    TopologyError,
    check_node_id,
    topic_filter_problem,
)
from edge_runtime.topology.keys import (
    BUDGET_KEYS,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_RELEASE_HORIZON,
    KEYS,
    NODE_FIELDS,
    SECAGG_MECHANISM,
)

__all__ = ["MIN_SECAGG_SLOT_S", "check_node"]

MIN_SECAGG_SLOT_S = float(KEYS["secagg_slot_s"].bound.low)  # type: ignore[union-attr, arg-type]
"""Shortest ``secagg_slot_s``: a slot's phases get at most half of it
(`edge_runtime.topology.secagg.slot_timeouts`), and a phase needs a round trip through the
broker and a few milliseconds of X25519 and Shamir work on each leaf."""


def _is_local_spec(source: object) -> bool:
    """Whether ``source`` is a local `SourceSpec` (its module is imported here, for a node
    with a source: a leaf reading its sensor topic does not load the sources)."""
    from edge_runtime.sources.spec import SourceSpec

    return isinstance(source, SourceSpec) and source.is_local


def check_node(values: dict[str, Any]) -> dict[str, Any]:
    """Check the settings of one node and return them normalised (module docstring).

    Parameters
    ----------
    values : dict of str to object
        Every field of `NodeConfig` (defaults filled in), as given.

    Returns
    -------
    dict of str to object
        A new dict of the same keys, normalised, to construct the node from.

    Raises
    ------
    TopologyError
        One line naming the node (``"node '<id>': ..."``) for the first problem found: a
        wrong type, a value out of range, privacy keys without all of ``epsilon``, ``delta``
        and ``clip_norm``, a key of another mechanism, an invalid ``sensor_topic`` filter,
        a non-local ``source``, or scoring on a private leaf without
        ``score_allow_private``.
    """
    node_id = values["id"]
    if not isinstance(node_id, str):
        raise TopologyError(
            f"node id must be a string, got {type_name(node_id)} {value_text(node_id)}"
        )
    check_node_id(node_id)
    where = f"node {node_id!r}"
    v = dict(values)
    for key in NODE_FIELDS:
        if key.name not in ("id", "source"):
            v[key.name] = key.check(where, v[key.name], TopologyError)
    if v["block_size"] is not None and v["block_size"] < v["rank"]:
        raise TopologyError(
            f"{where}: block_size must be >= rank ({v['rank']}), got {v['block_size']}"
        )
    lower, upper = v["rank_bounds"]
    if not 0.0 < lower < upper < 1.0:
        raise TopologyError(
            f"{where}: rank_bounds must satisfy 0 < lower < upper < 1, got [{lower}, {upper}]"
        )
    low, high = v["publish_min_interval_s"], v["publish_max_interval_s"]
    if low is not None and high is not None and high < low:
        raise TopologyError(
            f"{where}: publish_max_interval_s ({high}) must be >= publish_min_interval_s ({low})"
        )
    if v["sensor_topic"] is not None:
        problem = topic_filter_problem(v["sensor_topic"])
        if problem is not None:
            raise TopologyError(
                f"{where}: sensor_topic {v['sensor_topic']!r} is not a valid MQTT topic "
                f"filter: it {problem}"
            )
    if v["source"] is not None and not _is_local_spec(v["source"]):
        raise TopologyError(
            f"{where}: source must be a local SourceSpec (kind 'command', 'file' or "
            f"'serial'; an mqtt source is sensor_topic), got {v['source']!r}"
        )
    _check_privacy(v, where)
    _check_scoring(v, where)
    _check_sensor_range(v, where)
    if v["block_size"] is None and v["mechanism"] != "gaussian":
        v["block_size"] = DEFAULT_BLOCK_SIZE
    return v


def _check_scoring(v: dict[str, Any], where: str) -> None:
    """The privacy rule of scoring: a private leaf scores only with
    ``score_allow_private = true``."""
    if v["score"] != "off" and v["epsilon"] is not None and not v["score_allow_private"]:
        raise TopologyError(
            f"{where}: score = {v['score']!r} publishes a score of each reading of a private "
            "leaf, which the privacy guarantee does not cover; set score_allow_private = "
            "true to publish them anyway"
        )


def _check_sensor_range(v: dict[str, Any], where: str) -> None:
    """``valid_range`` finite with ``lo < hi``; ``out_of_range = "clip"`` needs it."""
    valid_range = v["valid_range"]
    if valid_range is not None:
        lo, hi = (np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in valid_range)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise TopologyError(
                f"{where}: valid_range must be finite numbers (the sensors' range from "
                f"their datasheet), got {value_text(valid_range)}"
            )
        bad = np.flatnonzero(lo >= hi)
        if bad.size:
            j = int(bad[0])
            at = f" for feature {j}" if lo.size > 1 else ""
            raise TopologyError(
                f"{where}: valid_range must have lo < hi{at}, got lo {lo[j]} and hi {hi[j]}"
            )
    if v["out_of_range"] == "clip" and valid_range is None:
        raise TopologyError(
            f"{where}: out_of_range = 'clip' needs valid_range (the range to clip into)"
        )


def _check_privacy(v: dict[str, Any], where: str) -> None:
    """The all-or-none rule of the differential-privacy keys, and what privacy excludes."""
    given = [key for key in BUDGET_KEYS if v[key] is not None]
    if given and len(given) < len(BUDGET_KEYS):
        missing = next(key for key in BUDGET_KEYS if v[key] is None)
        raise TopologyError(
            f"{where}: {missing} is missing: privacy needs epsilon, delta and clip_norm "
            f"together (got only {' and '.join(given)})"
        )
    if not given:
        for key in ("chunk_size", "noise_seed", "mechanism", "release_horizon"):
            if v[key] is not None:
                raise TopologyError(
                    f"{where}: {key} is only used with privacy "
                    "(set epsilon, delta and clip_norm too)"
                )
        return
    if v["center"]:
        raise TopologyError(
            f"{where}: center = true cannot be combined with privacy (epsilon, delta, "
            "clip_norm): the mean would be published without noise"
        )
    _check_mechanism(v, where)


def _check_mechanism(v: dict[str, Any], where: str) -> None:
    """``mechanism`` (default "gaussian") and the keys that only one mechanism uses; fills
    in ``mechanism`` and ``release_horizon``."""
    mechanism = MECHANISMS[0] if v["mechanism"] is None else v["mechanism"]
    if mechanism == FEDPOWER_MECHANISM:  # set by a FedPower `Topology` for its leaves
        for key in ("chunk_size", "release_horizon"):
            if v[key] is not None:
                raise TopologyError(
                    f"{where}: {key} is not used with mechanism {FEDPOWER_MECHANISM!r}"
                )
        return
    if mechanism not in (*MECHANISMS, SECAGG_MECHANISM):
        names = ", ".join(map(repr, (*MECHANISMS, SECAGG_MECHANISM)))
        raise TopologyError(f"{where}: mechanism must be one of {names}, got {mechanism!r}")
    v["mechanism"] = mechanism
    if mechanism not in ("gaussian", SECAGG_MECHANISM):
        if v["release_horizon"] is not None:
            raise TopologyError(
                f"{where}: release_horizon is only used with mechanism 'gaussian' or "
                f"{SECAGG_MECHANISM!r}, got "
                f"release_horizon = {v['release_horizon']} with mechanism {mechanism!r}"
            )
        return
    if v["chunk_size"] is not None:
        raise TopologyError(
            f"{where}: chunk_size is only used with mechanism 'fpca-eq8', got "
            f"chunk_size = {v['chunk_size']} with mechanism {mechanism!r}"
        )
    horizon = v["release_horizon"]
    if horizon is None:
        horizon = 1 if v["forget"] < 1.0 else DEFAULT_RELEASE_HORIZON
    if horizon != 1 and v["forget"] < 1.0:
        raise TopologyError(
            f"{where}: release_horizon = {horizon} needs forget = 1, got forget = "
            f"{v['forget']} (use release_horizon = 1 with a forgetting factor)"
        )
    v["release_horizon"] = horizon
