"""Reading a topology: TOML text or file to a validated `Topology`, with one-line errors.

`load_topology` reads a file, `parse_topology` parses text; both check the document's
tables and keys (unknown keys get a "did you mean" hint, TOML syntax errors the line and
column), merge ``[defaults]`` into each node, give a leaf its sensor topic or local source,
and leave the checks of each value to `NodeConfig` and of the tree to `Topology`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edge_runtime.declaration import type_name, value_text
from edge_runtime.topology.checks import (
    TopologyError,
    aggregator_privacy_message,
    aggregator_sensor_message,
    aggregator_sensor_topic_message,
    aggregator_source_message,
    check_keys,
    check_kind,
    check_node_id,
    unknown_key_message,
)
from edge_runtime.topology.fedpower_config import FedPowerConfig
from edge_runtime.topology.keys import (
    ADMIT_KEYS,
    ALGORITHMS,
    BUILTIN_DEFAULTS,
    DATA_KEYS,
    DEFAULT_PREFIX,
    DEFAULTABLE_KEYS,
    FEDPOWER_KEYS,
    NODE_KEYS,
    PRIVACY_KEYS,
    SCORE_KEYS,
    SENSOR_KEYS,
    SPLITS,
    TOP_LEVEL_KEYS,
    keys_where,
)
from edge_runtime.topology.node import NodeConfig
from edge_runtime.topology.parents import check_tree
from edge_runtime.topology.topics import default_sensor_topic
from edge_runtime.topology.tree import Topology

__all__ = ["load_topology", "parse_topology"]

_NODE_ONLY: frozenset[str] = frozenset(k.name for k in keys_where(scope="node"))
"""Keys of one ``[[nodes]]`` table only: never in ``[defaults]`` nor ``[nodes.admit]``."""

_TOML_POSITION = re.compile(r"^(?P<msg>.*) \(at line (?P<line>\d+), column (?P<col>\d+)\)$")
_TOML_AT_END = re.compile(r"^(?P<msg>.*) \(at end of document\)$")


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
        sharing a ``noise_seed``, an unknown split, an ``admit`` table on a node that is not
        open, or one with a key ``[defaults]`` may not hold or an invalid value.
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
    check_keys("topology", document, TOP_LEVEL_KEYS)

    name = check_kind(
        "topology", "name", document.get("name", source.stem if source else "topology")
    )
    if name == "":
        raise TopologyError('topology: name must be a non-empty string (set name = "...")')
    prefix = check_kind("topology", "prefix", document.get("prefix", DEFAULT_PREFIX))
    algorithm = check_kind("topology", "algorithm", document.get("algorithm", "fpca"))
    if algorithm not in ALGORITHMS:
        raise TopologyError(
            f"topology: unknown algorithm {algorithm!r}, expected one of: "
            f"{', '.join(map(repr, ALGORITHMS))}"
        )
    fedpower_keys = {k: document[k] for k in FEDPOWER_KEYS if k in document}
    if fedpower_keys and algorithm != "fedpower":
        key = next(iter(fedpower_keys))
        raise TopologyError(f'topology: {key} needs algorithm = "fedpower"')
    fedpower = FedPowerConfig(**{k.removeprefix("fedpower_"): v for k, v in fedpower_keys.items()})

    defaults = _table(document, "defaults")
    _check_defaults_keys(defaults)
    defaults = {k: check_kind("[defaults]", k, v) for k, v in defaults.items()}

    data = _table(document, "data")
    check_keys("[data]", data, DATA_KEYS)
    dataset = data.get("dataset")
    if dataset is not None:
        dataset = check_kind("[data]", "dataset", dataset)
        if dataset == "":
            raise TopologyError("[data]: dataset must be a built-in name or a path, got ''")
    split = check_kind("[data]", "split", data.get("split", "contiguous"))
    if split not in SPLITS:
        raise TopologyError(
            f"[data]: unknown split {split!r}, expected one of: {', '.join(map(repr, SPLITS))}"
        )

    raw_nodes = _raw_nodes(document)
    parents = {node_id: raw.get("parent") for node_id, raw in raw_nodes.items()}
    open_nodes = {node_id for node_id, raw in raw_nodes.items() if raw.get("open", False)}
    root = check_tree(parents, open_nodes)
    has_children = {parent for parent in parents.values() if parent is not None} | open_nodes

    nodes: dict[str, NodeConfig] = {}
    admit: dict[str, dict[str, Any]] = {}
    for node_id, raw in raw_nodes.items():
        table = raw.pop("admit", None)
        if table is not None and node_id not in open_nodes:
            raise TopologyError(
                f"node {node_id!r}: an admit table needs open = true (it holds the settings "
                "of the leaves an open aggregator admits at run time)"
            )
        if node_id in open_nodes:
            admit[node_id] = {**defaults, **_admit_table(node_id, table)}
        settings = {**BUILTIN_DEFAULTS, **defaults, **raw}
        if "rank" not in settings:
            raise TopologyError(f"node {node_id!r}: no rank; set rank in [defaults] or on the node")
        if node_id in has_children:
            if "source" in raw:
                raise TopologyError(aggregator_source_message(node_id))
            if "sensor_topic" in raw:
                raise TopologyError(aggregator_sensor_topic_message(node_id, raw["sensor_topic"]))
            settings["sensor_topic"] = None
            for key in PRIVACY_KEYS:  # [defaults] privacy settings are the leaves'
                if key in raw:
                    raise TopologyError(aggregator_privacy_message(node_id, key))
                settings[key] = None
            for key in SCORE_KEYS:  # [defaults] scoring settings are the leaves' too
                if key in raw:
                    raise TopologyError(
                        f"node {node_id!r} has children, so it is an aggregator and does not "
                        f"score readings: remove {key}"
                    )
                settings[key] = BUILTIN_DEFAULTS[key]
            for key in SENSOR_KEYS:  # and so are [defaults] sensor ranges
                if key in raw:
                    raise TopologyError(aggregator_sensor_message(node_id, key))
                settings[key] = BUILTIN_DEFAULTS[key]
        else:
            if "source" in raw:
                _leaf_source(node_id, raw, settings, source)
            settings.setdefault("sensor_topic", default_sensor_topic(node_id))
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
        admit=admit,
    )


def _admit_table(node_id: str, table: object) -> dict[str, Any]:
    """The ``[nodes.admit]`` table of open aggregator ``node_id``, keys and kinds checked
    (values are checked as a leaf's by `Topology`)."""
    where = f"[nodes.admit] of node {node_id!r}"
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise TopologyError(
            f"node {node_id!r}: admit must be a table ([nodes.admit]), got {type_name(table)}"
        )
    for key in table:
        if key in _NODE_ONLY:
            raise TopologyError(
                f"{where}: {key} cannot be set for the leaves an aggregator admits (each "
                "device has its own)"
            )
        if key not in ADMIT_KEYS:
            raise TopologyError(unknown_key_message(where, key, ADMIT_KEYS))
    return {key: check_kind(where, key, value) for key, value in table.items()}


def _leaf_source(
    node_id: str, raw: Mapping[str, Any], settings: dict[str, Any], file: Path | None
) -> None:
    """Validate leaf ``node_id``'s ``source`` table into ``settings``: a local spec goes to
    ``settings["source"]``; an mqtt spec sets ``sensor_topic`` (when it names a topic)."""
    from edge_runtime.sources.spec import SourceSpec  # here: only a leaf with a source

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
        raise TopologyError(f"topology: {key} must be a table ([{key}]), got {type_name(value)}")
    return value


def _check_defaults_keys(defaults: Mapping[str, Any]) -> None:
    for key in defaults:
        if key in _NODE_ONLY and key not in ("source", "noise_seed"):
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
        if key not in DEFAULTABLE_KEYS:
            raise TopologyError(unknown_key_message("[defaults]", key, DEFAULTABLE_KEYS))


def _raw_nodes(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The [[nodes]] tables by id, in file order, with keys and TOML types checked."""
    tables = document.get("nodes")
    if tables is None:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise TopologyError(
            f"topology: nodes must be an array of tables ([[nodes]]), got {type_name(tables)}"
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
                f"got {type_name(node_id)} {value_text(node_id)}"
            )
        check_node_id(node_id, where=f"nodes[{index}]: ")
        where = f"node {node_id!r}"
        if node_id in by_id:
            raise TopologyError(
                f"duplicate node id {node_id!r} (nodes[{index_of[node_id]}] and nodes[{index}])"
            )
        check_keys(where, table, NODE_KEYS)
        by_id[node_id] = {
            k: v if k in ("source", "admit") else check_kind(where, k, v) for k, v in table.items()
        }
        index_of[node_id] = index
    if not by_id:
        raise TopologyError("no nodes: add a root and at least one leaf as [[nodes]] tables")
    return by_id
