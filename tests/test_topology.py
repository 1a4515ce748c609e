"""Tests of edge_runtime.topology: parsing, validation, topic names and the dataset split."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_runtime import topology as topology_module
from edge_runtime.datasets import builtin_dataset_path
from edge_runtime.fpca.privacy import gaussian_default_block_size
from edge_runtime.topology import (
    NodeConfig,
    Topology,
    TopologyError,
    load_topology,
    parse_topology,
)
from edge_runtime.wire import PrivacyParams

TOPOLOGIES = Path(__file__).resolve().parents[1] / "topologies"

ROOT = '[[nodes]]\nid = "root"\n'
LEAF = '[[nodes]]\nid = "leaf"\nparent = "root"\n'
VALID = f"[defaults]\nrank = 2\n{ROOT}{LEAF}"


def node(node_id: str, parent: str | None = None, **keys: object) -> str:
    """One [[nodes]] table as TOML text; string values must be given already quoted."""
    lines = ["[[nodes]]", f'id = "{node_id}"']
    if parent is not None:
        lines.append(f'parent = "{parent}"')
    lines += [f"{key} = {value}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def tree(nodes: list[tuple[str, str | None]]) -> Topology:
    """A topology built directly from (id, parent) pairs, rank 1."""
    configs = {}
    has_children = {parent for _, parent in nodes if parent is not None}
    for node_id, parent in nodes:
        topic = None if node_id in has_children else f"sensors/{node_id}"
        configs[node_id] = NodeConfig(node_id, parent, rank=1, sensor_topic=topic)
    root = next(node_id for node_id, parent in nodes if parent is None)
    return Topology(name="t", prefix="fpca", nodes=configs, root=root)


def leaves_with_shares(shares: list[float], split: str = "contiguous") -> Topology:
    configs = {"root": NodeConfig("root", None, rank=1)}
    for i, share in enumerate(shares):
        leaf = f"leaf-{i}"
        configs[leaf] = NodeConfig(leaf, "root", rank=1, sensor_topic=f"s/{leaf}", share=share)
    return Topology(name="t", prefix="fpca", nodes=configs, root="root", split=split)


# --------------------------------------------------------------------------------------------
# The shipped files


@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_topology_loads_with_leaves_and_a_dataset_file(path: Path) -> None:
    topo = load_topology(path)
    assert topo.leaves()
    assert topo.source_path == path
    assert topo.dataset_path() is not None
    assert topo.dataset_path().is_file()


def test_the_shipped_topologies_include_motes_light_and_minimal() -> None:
    assert {p.name for p in TOPOLOGIES.glob("*.toml")} >= {"motes-light.toml", "minimal.toml"}


def test_motes_light_has_eight_leaves_under_two_sites_under_the_root() -> None:
    topo = load_topology(TOPOLOGIES / "motes-light.toml")
    assert topo.name == "motes-light"
    assert topo.root == "root"
    assert topo.leaves() == [f"pi-{i:02d}" for i in range(1, 9)]
    assert topo.aggregators() == ["root", "site-a", "site-b"]
    assert topo.children("root") == ["site-a", "site-b"]
    assert topo.children("site-a") == ["pi-01", "pi-02", "pi-03", "pi-04"]
    assert topo.children("pi-01") == []
    assert topo.leaves_under("site-b") == ["pi-05", "pi-06", "pi-07", "pi-08"]
    assert topo.leaves_under("root") == topo.leaves()
    assert topo.leaves_under("pi-03") == ["pi-03"]
    assert topo.is_leaf("pi-08")
    assert not topo.is_leaf("site-a")
    assert topo.dataset == "motes-light"
    assert topo.split == "contiguous"


def test_motes_light_nodes_carry_the_defaults() -> None:
    topo = load_topology(TOPOLOGIES / "motes-light.toml")
    for config in topo.nodes.values():
        assert config.rank == 10
        assert config.block_size == 50
        assert config.adaptive is False
        assert config.rank_bounds == (0.01, 0.10)
        assert config.holdoff == 1
        assert config.idle_flush_s is None  # the role's default (agents.policy)
        assert config.publish_max_interval_s is None
        assert config.share == 1.0
    assert topo.nodes["pi-04"].sensor_topic == "sensors/pi-04"
    assert topo.nodes["site-a"].sensor_topic is None
    assert topo.nodes["root"].parent is None
    assert topo.nodes["pi-04"].parent == "site-a"


def test_motes_light_topic_names_follow_the_tree() -> None:
    topo = load_topology(TOPOLOGIES / "motes-light.toml")
    assert topo.path("root") == "root"
    assert topo.path("site-b") == "root/site-b"
    assert topo.path("pi-07") == "root/site-b/pi-07"
    assert topo.subspace_topic("pi-07") == "fpca/root/site-b/pi-07/subspace"
    assert topo.status_topic("pi-07") == "fpca/root/site-b/pi-07/status"
    assert topo.status_detail_topic("pi-07") == "fpca/root/site-b/pi-07/status/detail"
    assert topo.subspace_topic("site-a") == "fpca/root/site-a/subspace"
    assert topo.subspace_topic("root") == "fpca/root/subspace"
    assert topo.model_topic() == "fpca/root/model"
    assert topo.children_filter("site-a") == "fpca/root/site-a/+/subspace"
    assert topo.children_filter("root") == "fpca/root/+/subspace"


def test_motes_light_splits_the_dataset_into_eight_contiguous_equal_ranges() -> None:
    topo = load_topology(TOPOLOGIES / "motes-light.toml")
    parts = topo.split_rows(7712)
    assert list(parts) == topo.leaves()
    assert [len(rows) for rows in parts.values()] == [964] * 8
    np.testing.assert_array_equal(np.concatenate(list(parts.values())), np.arange(7712))


def test_minimal_has_two_leaves_directly_under_the_root() -> None:
    topo = load_topology(TOPOLOGIES / "minimal.toml")
    assert topo.leaves() == topo.children(topo.root)
    assert len(topo.leaves()) == 2
    assert topo.aggregators() == [topo.root]


# --------------------------------------------------------------------------------------------
# Parsing features


def test_node_keys_override_defaults_and_builtin_defaults_fill_the_rest() -> None:
    text = (
        "[defaults]\nrank = 3\nadaptive = true\n"
        + ROOT
        + node("a", "root", rank=5, block_size=7, rank_bounds="[0.2, 0.5]", idle_flush_s=2)
        + node("b", "root")
    )
    topo = parse_topology(text)
    a, b = topo.nodes["a"], topo.nodes["b"]
    assert (a.rank, a.block_size, a.adaptive, a.rank_bounds) == (5, 7, True, (0.2, 0.5))
    assert a.idle_flush_s == 2.0
    assert isinstance(a.idle_flush_s, float)
    assert (b.rank, b.block_size, b.adaptive, b.rank_bounds) == (3, 50, True, (0.01, 0.10))
    assert (b.holdoff, b.idle_flush_s, b.share) == (1, None, 1.0)


def test_prefix_defaults_to_fpca_and_may_have_several_levels() -> None:
    assert parse_topology(VALID).prefix == "fpca"
    topo = parse_topology('prefix = "lab/fpca"\n' + VALID)
    assert topo.subspace_topic("leaf") == "lab/fpca/root/leaf/subspace"
    assert topo.model_topic() == "lab/fpca/root/model"


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-site.toml"
    path.write_text(VALID)
    assert load_topology(path).name == "my-site"
    assert parse_topology('name = "x"\n' + VALID).name == "x"


def test_a_leaf_may_set_its_own_sensor_topic_with_wildcards() -> None:
    text = "[defaults]\nrank = 1\n" + ROOT + node("leaf", "root", sensor_topic='"lab/room-2/+"')
    assert parse_topology(text).nodes["leaf"].sensor_topic == "lab/room-2/+"


def test_without_data_table_there_is_no_dataset_and_the_split_is_contiguous() -> None:
    topo = parse_topology(VALID)
    assert topo.dataset is None
    assert topo.dataset_path() is None
    assert topo.split == "contiguous"


def test_a_builtin_dataset_name_resolves_to_the_shipped_file(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[data]\ndataset = "motes-light"\n' + VALID)
    assert load_topology(path).dataset_path() == builtin_dataset_path("motes-light")


def test_a_relative_dataset_path_resolves_against_the_topology_folder(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.toml"
    path.parent.mkdir()
    path.write_text('[data]\ndataset = "data/x.csv"\nsplit = "round-robin"\n' + VALID)
    topo = load_topology(path)
    assert topo.dataset_path() == tmp_path / "sub" / "data" / "x.csv"
    assert topo.split == "round-robin"


def test_an_absolute_dataset_path_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.csv"
    path = tmp_path / "sub" / "t.toml"
    path.parent.mkdir()
    path.write_text(f'[data]\ndataset = "{target}"\n' + VALID)
    assert load_topology(path).dataset_path() == target


def test_a_relative_dataset_path_parsed_from_text_stays_relative() -> None:
    topo = parse_topology('[data]\ndataset = "x.csv"\n' + VALID)
    assert topo.dataset_path() == Path("x.csv")


def test_children_keep_file_order_even_when_declared_before_their_parent() -> None:
    text = (
        "[defaults]\nrank = 1\n"
        + node("z", "agg")
        + node("agg", "root")
        + node("a", "agg")
        + ROOT
        + node("m", "root")
    )
    topo = parse_topology(text)
    assert topo.root == "root"
    assert topo.children("agg") == ["z", "a"]
    assert topo.children("root") == ["agg", "m"]
    assert topo.leaves() == ["z", "a", "m"]
    assert topo.path("z") == "root/agg/z"


def test_unknown_node_ids_in_queries_raise_naming_the_id() -> None:
    topo = parse_topology(VALID)
    for query in (topo.path, topo.children, topo.is_leaf, topo.subspace_topic):
        with pytest.raises(TopologyError, match="unknown node 'ghost'"):
            query("ghost")


def test_topology_and_nodes_are_frozen() -> None:
    topo = parse_topology(VALID)
    with pytest.raises(AttributeError):
        topo.root = "leaf"  # type: ignore[misc]
    with pytest.raises(TypeError):
        topo.nodes["x"] = topo.nodes["leaf"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        topo.nodes["leaf"].rank = 3  # type: ignore[misc]


def test_the_public_names_resolve_and_parse_a_tree_of_node_configs() -> None:
    # The exact list of names is pinned once, by test_public_api.py; here, what they do.
    for name in topology_module.__all__:
        assert getattr(topology_module, name) is not None
    topo = topology_module.parse_topology(VALID)
    assert isinstance(topo, topology_module.Topology)
    assert all(isinstance(node, topology_module.NodeConfig) for node in topo.nodes.values())
    assert issubclass(topology_module.TopologyError, ValueError)


# --------------------------------------------------------------------------------------------
# Validation errors: one line, naming the offending node or key

D = "[defaults]\nrank = 2\n"
P = {"epsilon": 1.0, "delta": 1e-5, "clip_norm": 2.5}  # a valid privacy setting of a leaf


def priv(**overrides: object) -> dict[str, object]:
    """`P` with some keys replaced (TOML values, strings already quoted)."""
    return {**P, **overrides}


ERROR_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    # tree structure
    ("duplicate id", D + ROOT + LEAF + LEAF, ("duplicate node id 'leaf'",)),
    ("unknown parent", D + ROOT + node("leaf", "roto"), ("'leaf'", "unknown parent 'roto'")),
    ("no root", D + node("a", "b") + node("b", "a"), ("no root", "'a'", "'b'")),
    ("self parent", D + node("a", "a"), ("no root", "'a' -> 'a'")),
    ("two roots", D + ROOT + node("other") + LEAF, ("2 roots", "'root'", "'other'")),
    ("cycle", D + ROOT + LEAF + node("c1", "c2") + node("c2", "c1"), ("cycle", "'c1'", "'c2'")),
    ("under a cycle", D + ROOT + LEAF + node("x", "c1") + node("c1", "c1"), ("'c1'", "cycle")),
    ("root without leaves", D + ROOT, ("root 'root' has no children",)),
    ("no nodes", D, ("no nodes",)),
    ("nodes not tables", "nodes = 5\n" + D, ("nodes must be an array of tables", "integer")),
    # ids
    ("empty id", D + ROOT + node("", "root"), ("node id ''", "empty")),
    ("slash in id", D + ROOT + node("a/b", "root"), ("'a/b'", "'/'")),
    ("plus in id", D + ROOT + node("a+b", "root"), ("'a+b'", "'+'")),
    ("hash in id", D + ROOT + node("a#b", "root"), ("'a#b'", "'#'")),
    ("NUL in id", D + ROOT + node("a\\u0000b", "root"), ("'a\\x00b'", "NUL")),
    ("newline in id", D + ROOT + node("a\\nb", "root"), ("'a\\nb'", "control")),
    ("id subspace", D + ROOT + node("subspace", "root"), ("'subspace'", "reserved")),
    ("id status", D + ROOT + node("status", "root"), ("'status'", "reserved")),
    ("id model", D + ROOT + node("model", "root"), ("'model'", "reserved")),
    ("id scores", D + ROOT + node("scores", "root"), ("'scores'", "reserved")),
    ("long id", D + ROOT + node("x" * 65, "root"), ("'" + "x" * 65 + "'", "65 characters")),
    ("missing id", D + ROOT + "[[nodes]]\nparent = 'root'\n", ("nodes[1]", "no id")),
    ("id not a string", D + ROOT + "[[nodes]]\nid = 7\n", ("nodes[1]", "id must be a string")),
    # values
    ("rank 0", D + ROOT + node("leaf", "root", rank=0), ("'leaf'", "rank must be >= 1")),
    ("rank missing", ROOT + LEAF, ("'root'", "no rank")),
    ("block < rank", D + ROOT + node("leaf", "root", block_size=1), ("'leaf'", "block_size")),
    ("bounds lo 0", D + ROOT + node("leaf", "root", rank_bounds="[0, 0.1]"), ("'leaf'",)),
    ("bounds hi 1", D + ROOT + node("leaf", "root", rank_bounds="[0.1, 1]"), ("'leaf'",)),
    ("bounds equal", D + ROOT + node("leaf", "root", rank_bounds="[0.1, 0.1]"), ("'leaf'",)),
    ("bounds reversed", D + ROOT + node("leaf", "root", rank_bounds="[0.2, 0.1]"), ("'leaf'",)),
    ("bounds nan", D + ROOT + node("leaf", "root", rank_bounds="[nan, 0.1]"), ("'leaf'",)),
    ("bounds length", D + ROOT + node("leaf", "root", rank_bounds="[0.1]"), ("'leaf'", "array")),
    ("holdoff 0", D + ROOT + node("leaf", "root", holdoff=0), ("'leaf'", "holdoff")),
    ("idle 0", D + ROOT + node("leaf", "root", idle_flush_s=0), ("'leaf'", "idle_flush_s")),
    ("idle negative", D + ROOT + node("leaf", "root", idle_flush_s=-1.5), ("'leaf'", "idle")),
    ("idle inf", D + ROOT + node("leaf", "root", idle_flush_s="inf"), ("'leaf'", "idle")),
    ("share 0", D + ROOT + node("leaf", "root", share=0), ("'leaf'", "share")),
    ("share negative", D + ROOT + node("leaf", "root", share=-1), ("'leaf'", "share")),
    ("share nan", D + ROOT + node("leaf", "root", share="nan"), ("'leaf'", "share")),
    ("defaults value", "[defaults]\nrank = 0\n" + ROOT + LEAF, ("'root'", "rank must be >= 1")),
    # TOML types
    ("rank bool", D + ROOT + node("leaf", "root", rank="true"), ("'leaf'", "boolean true")),
    ("rank float", D + ROOT + node("leaf", "root", rank=3.0), ("'leaf'", "integer", "float")),
    ("rank string", D + ROOT + node("leaf", "root", rank='"3"'), ("'leaf'", "string '3'")),
    ("adaptive int", D + ROOT + node("leaf", "root", adaptive=1), ("'leaf'", "boolean")),
    ("share bool", D + ROOT + node("leaf", "root", share="false"), ("'leaf'", "a number")),
    ("idle bool", D + ROOT + node("leaf", "root", idle_flush_s="true"), ("'leaf'", "number")),
    (
        "bounds bool",
        D + ROOT + node("leaf", "root", rank_bounds="[true, 0.5]"),
        ("'leaf'", "[true, 0.5]"),
    ),
    ("parent int", D + ROOT + '[[nodes]]\nid = "leaf"\nparent = 1\n', ("'leaf'", "parent")),
    ("topic int", D + ROOT + node("leaf", "root", sensor_topic=5), ("'leaf'", "sensor_topic")),
    ("defaults type", "[defaults]\nrank = 'x'\n" + ROOT + LEAF, ("[defaults]", "rank")),
    ("defaults not table", "defaults = 3\n" + ROOT + LEAF, ("defaults must be a table",)),
    ("data not table", 'data = "x"\n' + VALID, ("data must be a table",)),
    ("name int", "name = 3\n" + VALID, ("name must be a string",)),
    ("name empty", 'name = ""\n' + VALID, ("name must be a non-empty string",)),
    ("prefix int", "prefix = 3\n" + VALID, ("prefix must be a string",)),
    # unknown keys
    ("node key", D + ROOT + node("leaf", "root", rnak=2), ("'leaf'", "'rnak'", "'rank'")),
    ("top key", "nodez = 1\n" + VALID, ("unknown key 'nodez'", "did you mean 'nodes'")),
    ("data key", '[data]\nsplitt = "contiguous"\n' + VALID, ("[data]", "'splitt'")),
    ("defaults key", "[defaults]\nrank = 2\nforgetting = 0.9\n" + ROOT + LEAF, ("'forgetting'",)),
    ("defaults id", '[defaults]\nrank = 2\nid = "x"\n' + ROOT + LEAF, ("[defaults]", "id")),
    ("defaults parent", '[defaults]\nrank = 2\nparent = "root"\n' + ROOT + LEAF, ("parent",)),
    ("defaults topic", '[defaults]\nrank = 2\nsensor_topic = "s"\n' + ROOT + LEAF, ("topic",)),
    # data, prefix, sensor topics
    ("unknown split", '[data]\nsplit = "random"\n' + VALID, ("unknown split 'random'",)),
    ("empty dataset", '[data]\ndataset = ""\n' + VALID, ("dataset",)),
    ("prefix plus", 'prefix = "a/+"\n' + VALID, ("prefix 'a/+'", "wildcard")),
    ("prefix hash", 'prefix = "#"\n' + VALID, ("prefix '#'",)),
    ("prefix leading slash", 'prefix = "/fpca"\n' + VALID, ("prefix '/fpca'",)),
    ("prefix trailing slash", 'prefix = "fpca/"\n' + VALID, ("prefix 'fpca/'",)),
    ("prefix empty", 'prefix = ""\n' + VALID, ("prefix ''", "empty")),
    ("prefix empty level", 'prefix = "a//b"\n' + VALID, ("prefix 'a//b'",)),
    ("prefix dollar", 'prefix = "$SYS"\n' + VALID, ("prefix '$SYS'",)),
    (
        "topic on aggregator",
        D + node("root", None, sensor_topic='"sensors/root"') + LEAF,
        ("'root'", "aggregator", "sensor_topic"),
    ),
    ("bad topic filter", D + ROOT + node("leaf", "root", sensor_topic='"a/#/b"'), ("'leaf'",)),
    ("topic plus", D + ROOT + node("leaf", "root", sensor_topic='"a/b+"'), ("'leaf'", "'+'")),
    ("empty topic", D + ROOT + node("leaf", "root", sensor_topic='""'), ("'leaf'", "empty")),
    # differential privacy
    ("no delta", D + ROOT + node("leaf", "root", epsilon=1, clip_norm=2), ("'leaf'", "delta")),
    ("no clip", D + ROOT + node("leaf", "root", epsilon=1, delta=1e-5), ("'leaf'", "clip_norm")),
    ("no epsilon", D + ROOT + node("leaf", "root", delta=1e-5, clip_norm=2), ("'leaf'", "epsilon")),
    ("epsilon 0", D + ROOT + node("leaf", "root", **priv(epsilon=0)), ("'leaf'", "epsilon", "> 0")),
    ("epsilon inf", D + ROOT + node("leaf", "root", **priv(epsilon="inf")), ("'leaf'", "epsilon")),
    ("delta 0", D + ROOT + node("leaf", "root", **priv(delta=0)), ("'leaf'", "delta", "(0, 1)")),
    ("delta 1", D + ROOT + node("leaf", "root", **priv(delta=1)), ("'leaf'", "delta", "(0, 1)")),
    ("clip 0", D + ROOT + node("leaf", "root", **priv(clip_norm=0)), ("'leaf'", "clip_norm")),
    ("clip nan", D + ROOT + node("leaf", "root", **priv(clip_norm="nan")), ("'leaf'", "clip_norm")),
    ("chunk 0", D + ROOT + node("leaf", "root", **priv(chunk_size=0)), ("'leaf'", "chunk_size")),
    ("seed < 0", D + ROOT + node("leaf", "root", **priv(noise_seed=-1)), ("'leaf'", "noise_seed")),
    ("epsilon bool", D + ROOT + node("leaf", "root", **priv(epsilon="true")), ("'leaf'", "number")),
    ("chunk float", D + ROOT + node("leaf", "root", **priv(chunk_size=2.0)), ("'leaf'", "integer")),
    (
        "seed string",
        D + ROOT + node("leaf", "root", **priv(noise_seed='"7"')),
        ("'leaf'", "string"),
    ),
    (
        "chunk without privacy",
        D + ROOT + node("leaf", "root", chunk_size=8),
        ("'leaf'", "chunk_size is only used with privacy"),
    ),
    (
        "seed without privacy",
        D + ROOT + node("leaf", "root", noise_seed=8),
        ("'leaf'", "noise_seed is only used with privacy"),
    ),
    (
        "privacy on an aggregator",
        D + node("root", None, epsilon=1.0) + LEAF,
        ("'root'", "aggregator", "epsilon", "leaves only"),
    ),
    (
        "seed on an aggregator",
        D + node("root", None, noise_seed=1) + LEAF,
        ("'root'", "aggregator", "noise_seed"),
    ),
    ("seed default", D + "noise_seed = 1\n" + ROOT + LEAF, ("[defaults]", "noise_seed")),
    (
        "shared seed",
        D
        + ROOT
        + node("a", "root", **priv(noise_seed=3))
        + node("b", "root", **priv(noise_seed=3)),
        ("'a'", "'b'", "noise_seed 3"),
    ),
    (
        "center with privacy",
        D + ROOT + node("leaf", "root", **priv(center="true")),
        ("'leaf'", "center", "privacy"),
    ),
    (
        "defaults without clip_norm",
        "[defaults]\nrank = 2\nepsilon = 1.0\ndelta = 1e-5\n" + ROOT + LEAF,
        ("'leaf'", "clip_norm is missing"),
    ),
    # the private mechanism
    (
        "unknown mechanism",
        D + ROOT + node("leaf", "root", **priv(mechanism='"laplace"')),
        ("'leaf'", "mechanism must be one of 'gaussian', 'fpca-eq8'", "'laplace'"),
    ),
    (
        "mechanism not a string",
        D + ROOT + node("leaf", "root", **priv(mechanism=1)),
        ("'leaf'", "mechanism must be a string", "integer 1"),
    ),
    (
        "mechanism without privacy",
        D + ROOT + node("leaf", "root", mechanism='"gaussian"'),
        ("'leaf'", "mechanism is only used with privacy"),
    ),
    (
        "horizon without privacy",
        D + ROOT + node("leaf", "root", release_horizon=4),
        ("'leaf'", "release_horizon is only used with privacy"),
    ),
    (
        "chunk with gaussian",
        D + ROOT + node("leaf", "root", **priv(chunk_size=8)),
        ("'leaf'", "chunk_size is only used with mechanism 'fpca-eq8'", "chunk_size = 8"),
    ),
    (
        "chunk with gaussian from defaults",
        D + "epsilon = 1.0\ndelta = 1e-5\nclip_norm = 2.0\nchunk_size = 8\n" + ROOT + LEAF,
        ("'leaf'", "chunk_size is only used with mechanism 'fpca-eq8'"),
    ),
    (
        "horizon with eq8",
        D + ROOT + node("leaf", "root", **priv(mechanism='"fpca-eq8"', release_horizon=4)),
        ("'leaf'", "release_horizon is only used with mechanism 'gaussian'", "= 4", "'fpca-eq8'"),
    ),
    (
        "horizon 0",
        D + ROOT + node("leaf", "root", **priv(release_horizon=0)),
        ("'leaf'", "release_horizon must be in [1, 4096]", "got 0"),
    ),
    (
        "horizon 4097",
        D + ROOT + node("leaf", "root", **priv(release_horizon=4097)),
        ("'leaf'", "release_horizon must be in [1, 4096]", "got 4097"),
    ),
    (
        "horizon float",
        D + ROOT + node("leaf", "root", **priv(release_horizon=4.0)),
        ("'leaf'", "release_horizon must be an integer", "float 4.0"),
    ),
    (
        "horizon with forget",
        D + ROOT + node("leaf", "root", **priv(release_horizon=4, forget=0.9)),
        ("'leaf'", "release_horizon = 4 needs forget = 1", "forget = 0.9"),
    ),
    (
        "mechanism on an aggregator",
        D + node("root", None, mechanism='"gaussian"') + LEAF,
        ("'root'", "aggregator", "mechanism", "leaves only"),
    ),
    (
        "horizon on an aggregator",
        D + node("root", None, release_horizon=2) + LEAF,
        ("'root'", "aggregator", "release_horizon", "leaves only"),
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param(text, expected, id=name) for name, text, expected in ERROR_CASES],
)
def test_invalid_topologies_raise_one_line_errors_naming_the_problem(
    text: str, expected: tuple[str, ...]
) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(text)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(D + ROOT + node("leaf", "root", rank=0))
    with pytest.raises(TopologyError, match=r"bad\.toml: node 'leaf': rank must be >= 1"):
        load_topology(path)


def test_toml_syntax_errors_name_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "syntax.toml"
    path.write_text('name = "x"\n[defaults]\nrank = 10 12\n')
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: TOML syntax error at line 3, column ")


def test_toml_syntax_errors_at_the_end_of_the_text_still_give_line_and_column() -> None:
    with pytest.raises(TopologyError, match=r"<string>: TOML syntax error at line 2, column 9"):
        parse_topology('name = "x"\nrank = [')


def test_duplicate_toml_keys_are_syntax_errors() -> None:
    with pytest.raises(TopologyError, match="TOML syntax error"):
        parse_topology("[defaults]\nrank = 1\nrank = 2\n" + ROOT + LEAF)


def test_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(TopologyError, match=r"topology file not found: .*nope\.toml"):
        load_topology(missing)


def test_a_directory_is_not_a_topology_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="is a directory"):
        load_topology(tmp_path)


def test_a_file_that_is_not_utf8_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(TopologyError, match=r"latin1\.toml: not UTF-8"):
        load_topology(path)


def test_privacy_defaults_apply_to_leaves_and_aggregators_only_report() -> None:
    text = (
        "[defaults]\nrank = 3\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 10\nchunk_size = 4\n"
        'mechanism = "fpca-eq8"\n'
        '[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "site"\nparent = "root"\n'
        '[[nodes]]\nid = "a"\nparent = "site"\nnoise_seed = 7\nepsilon = 0.5\n'
        '[[nodes]]\nid = "b"\nparent = "site"\n'
    )
    topology = parse_topology(text)
    a, b = topology.nodes["a"], topology.nodes["b"]
    assert (a.epsilon, a.delta, a.clip_norm, a.chunk_size, a.noise_seed) == (
        0.5, 1e-5, 10.0, 4, 7
    )  # fmt: skip
    assert type(a.clip_norm) is float
    assert a.privacy == PrivacyParams(0.5, 1e-5, 10.0, mechanism="fpca-eq8")
    assert (a.privacy.neighbours, type(a.privacy.clip_norm)) == ("replace-one", float)
    assert (b.privacy, b.noise_seed) == (PrivacyParams(1.0, 1e-5, 10.0, "fpca-eq8"), None)
    for aggregator in ("root", "site"):
        config = topology.nodes[aggregator]
        assert config.privacy is None
        assert (config.epsilon, config.delta, config.clip_norm, config.chunk_size) == (None,) * 4
        assert (config.mechanism, config.release_horizon) == (None, None)
    assert (a.mechanism, b.mechanism) == ("fpca-eq8", "fpca-eq8")
    assert a.release_horizon is None  # a gaussian-only key


def test_without_privacy_keys_a_node_has_no_privacy() -> None:
    topology = parse_topology(VALID)
    assert topology.nodes["leaf"].privacy is None
    assert topology.nodes["leaf"].noise_seed is None
    assert topology.nodes["leaf"].mechanism is None
    assert topology.nodes["leaf"].release_horizon is None
    assert topology.nodes["leaf"].block_size == 50


def private_leaf(**keys: object) -> NodeConfig:
    """The leaf of a root -> leaf topology with privacy `P` and ``keys`` (TOML values)."""
    return parse_topology(D + ROOT + node("leaf", "root", **priv(**keys))).nodes["leaf"]


def test_a_private_leaf_defaults_to_the_gaussian_mechanism_with_horizon_64() -> None:
    leaf = private_leaf()
    assert leaf.mechanism == "gaussian" == topology_module.MECHANISMS[0]
    assert leaf.release_horizon == topology_module.DEFAULT_RELEASE_HORIZON == 64
    assert leaf.chunk_size is None


def test_the_mechanism_and_horizon_can_be_chosen_per_leaf_or_in_defaults() -> None:
    text = D + ROOT + node("a", "root", **priv(release_horizon=8))
    text += node("b", "root", **priv(release_horizon=1))
    text += node("c", "root", **priv(mechanism='"fpca-eq8"', chunk_size=4))
    nodes = parse_topology(text).nodes
    assert (nodes["a"].mechanism, nodes["a"].release_horizon) == ("gaussian", 8)
    assert (nodes["b"].mechanism, nodes["b"].release_horizon) == ("gaussian", 1)
    assert (nodes["c"].mechanism, nodes["c"].release_horizon, nodes["c"].chunk_size) == (
        "fpca-eq8",
        None,
        4,
    )
    defaults = D + 'mechanism = "fpca-eq8"\n' + ROOT + node("a", "root", **P)
    defaults += node("b", "root", **priv(mechanism='"gaussian"', release_horizon=2))
    nodes = parse_topology(defaults).nodes
    assert (nodes["a"].mechanism, nodes["b"].mechanism) == ("fpca-eq8", "gaussian")
    assert nodes["b"].release_horizon == 2
    # a [defaults] release_horizon reaches every leaf, the eq. (8) ones too: refused there
    mixed = D + "release_horizon = 8\n" + ROOT + node("a", "root", **P)
    mixed += node("c", "root", **priv(mechanism='"fpca-eq8"'))
    with pytest.raises(TopologyError, match="'c': release_horizon is only used with mechanism"):
        parse_topology(mixed)


def test_a_forgetting_gaussian_leaf_defaults_to_horizon_one() -> None:
    assert private_leaf(forget=0.9).release_horizon == 1
    assert private_leaf(forget=0.9, release_horizon=1).release_horizon == 1


def test_a_private_gaussian_leaf_without_block_size_uses_the_mechanisms_default() -> None:
    gaussian = private_leaf()
    assert gaussian.block_size is None  # resolved once the width of a reading is known
    # gaussian_default_block_size(1, 1e-5, 48, 64): release noise spectral norm <= T / 10
    assert gaussian.block_size_for(48) == gaussian_default_block_size(1.0, 1e-5, 48, 64) == 799
    assert private_leaf(release_horizon=1).block_size_for(48) == 517
    assert private_leaf(block_size=241).block_size_for(48) == 241
    # never below the rank (D sets rank 2): tiny widths, explicit blocks
    assert private_leaf(epsilon=1e4).block_size_for(1) >= 1
    eq8 = private_leaf(mechanism='"fpca-eq8"')
    assert eq8.block_size == 50 == topology_module.DEFAULT_BLOCK_SIZE  # the rule of before
    assert eq8.block_size_for(48) == 50
    with pytest.raises(ValueError, match="n_features must be an integer >= 1"):
        gaussian.block_size_for(0)


def test_motes_light_private_is_motes_light_with_privacy_on_every_leaf() -> None:
    private = load_topology(TOPOLOGIES / "motes-light-private.toml")
    plain = load_topology(TOPOLOGIES / "motes-light.toml")
    assert private.leaves() == plain.leaves()
    assert private.aggregators() == plain.aggregators()
    assert all(private.path(n) == plain.path(n) for n in plain.nodes)
    assert private.split_rows(7712).keys() == plain.split_rows(7712).keys()
    for leaf in private.leaves():
        config = private.nodes[leaf]
        assert (config.epsilon, config.delta, config.clip_norm) == (1.0, 1e-5, 8230.0)
        assert (config.mechanism, config.block_size, config.release_horizon) == (
            "gaussian",
            241,
            4,
        )
        assert config.noise_seed is None  # a deployment draws from OS entropy
        # no short (flushed) block in `run`, and each leaf's blocks are one segment
        assert config.block_size * config.release_horizon == 7712 // 8
    assert all(private.nodes[n].privacy is None for n in private.aggregators())


def test_motes_light_dpdispca_releases_each_leafs_share_once() -> None:
    dpdispca = load_topology(TOPOLOGIES / "motes-light-dpdispca.toml")
    plain = load_topology(TOPOLOGIES / "motes-light.toml")
    assert dpdispca.leaves() == plain.leaves()
    assert all(dpdispca.path(n) == plain.path(n) for n in plain.nodes)
    shares = dpdispca.split_rows(7712)
    for leaf in dpdispca.leaves():
        config = dpdispca.nodes[leaf]
        assert (config.epsilon, config.delta, config.clip_norm) == (1.0, 1e-5, 8230.0)
        assert (config.mechanism, config.release_horizon) == ("gaussian", 1)
        assert config.block_size == len(shares[leaf]) == 964


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(TopologyError, match="node 'a': rank must be >= 1"):
        NodeConfig("a", None, rank=0)
    with pytest.raises(TopologyError, match="node id 'a/b'"):
        NodeConfig("a/b", None, rank=1)
    topo = tree([("root", None), ("leaf", "root")])
    with pytest.raises(TopologyError, match="root is 'leaf'"):
        Topology(name="t", prefix="fpca", nodes=topo.nodes, root="leaf")
    with pytest.raises(TopologyError, match="leaf 'leaf' has no sensor_topic"):
        Topology(
            name="t",
            prefix="fpca",
            nodes={"root": topo.nodes["root"], "leaf": NodeConfig("leaf", "root", rank=1)},
            root="root",
        )
    with pytest.raises(TopologyError, match="node 'a': clip_norm is missing"):
        NodeConfig("a", None, rank=1, epsilon=1.0, delta=0.1)
    private_root = NodeConfig("root", None, rank=1, epsilon=1.0, delta=0.1, clip_norm=1.0)
    with pytest.raises(TopologyError, match="'root' has children, so it is an aggregator"):
        Topology(name="t", prefix="fpca", nodes={**topo.nodes, "root": private_root}, root="root")
    seeded = {
        node_id: NodeConfig(node_id, "root", rank=1, sensor_topic=f"s/{node_id}", **P, noise_seed=5)
        for node_id in ("a", "b")
    }
    with pytest.raises(TopologyError, match="'a' and 'b' share noise_seed 5"):
        Topology(name="t", prefix="fpca", nodes={"root": topo.nodes["root"], **seeded}, root="root")


# --------------------------------------------------------------------------------------------
# split_rows


def test_contiguous_split_follows_shares_with_largest_remainder_rounding() -> None:
    topo = leaves_with_shares([1.0, 2.0, 1.0])
    parts = topo.split_rows(10)  # quotas 2.5, 5, 2.5: the tie goes to the earlier leaf
    assert [rows.tolist() for rows in parts.values()] == [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9]]
    assert all(rows.dtype == np.int64 for rows in parts.values())


def test_round_robin_split_deals_row_i_to_leaf_i_mod_k() -> None:
    topo = leaves_with_shares([1.0, 5.0, 1.0], split="round-robin")
    parts = topo.split_rows(8)
    assert [rows.tolist() for rows in parts.values()] == [[0, 3, 6], [1, 4, 7], [2, 5]]


@pytest.mark.parametrize("split", ["contiguous", "round-robin"])
def test_fewer_rows_than_leaves_leaves_some_leaves_empty(split: str) -> None:
    parts = leaves_with_shares([1.0] * 5, split=split).split_rows(3)
    assert [len(rows) for rows in parts.values()] == [1, 1, 1, 0, 0]
    assert all(len(rows) == 0 for rows in leaves_with_shares([1.0] * 3).split_rows(0).values())


@pytest.mark.parametrize("bad", [-1, 2.5, True, "10", None])
def test_split_rows_rejects_anything_but_a_non_negative_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="n_rows must be a non-negative integer"):
        leaves_with_shares([1.0]).split_rows(bad)  # type: ignore[arg-type]


def test_split_rows_accepts_numpy_integers() -> None:
    parts = leaves_with_shares([1.0, 1.0]).split_rows(np.int64(4))
    assert [rows.tolist() for rows in parts.values()] == [[0, 1], [2, 3]]


@settings(max_examples=200, deadline=None)
@given(
    shares=st.lists(
        st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=12,
    ),
    n_rows=st.integers(min_value=0, max_value=5000),
)
def test_contiguous_split_covers_every_row_once_in_order_and_within_one_of_the_quota(
    shares: list[float], n_rows: int
) -> None:
    parts = leaves_with_shares(shares).split_rows(n_rows)
    assert len(parts) == len(shares)
    np.testing.assert_array_equal(np.concatenate(list(parts.values())), np.arange(n_rows))
    total = sum(Fraction(s) for s in shares)
    for share, rows in zip(shares, parts.values(), strict=True):
        assert abs(len(rows) - n_rows * Fraction(share) / total) < 1


@settings(max_examples=100, deadline=None)
@given(n_leaves=st.integers(min_value=1, max_value=12), n_rows=st.integers(0, 5000))
def test_round_robin_split_covers_every_row_once(n_leaves: int, n_rows: int) -> None:
    parts = leaves_with_shares([1.0] * n_leaves, split="round-robin").split_rows(n_rows)
    owner = np.full(n_rows, -1)
    for index, rows in enumerate(parts.values()):
        assert (owner[rows] == -1).all()
        owner[rows] = index
    np.testing.assert_array_equal(owner, np.arange(n_rows) % n_leaves)
    counts = [len(rows) for rows in parts.values()]
    assert max(counts) - min(counts) <= 1


def test_a_topology_loaded_twice_is_equal_and_hashable() -> None:
    first = load_topology(TOPOLOGIES / "motes-light.toml")
    second = load_topology(TOPOLOGIES / "motes-light.toml")
    assert first == second
    assert {first: "ok"}[second] == "ok"
    assert first != load_topology(TOPOLOGIES / "minimal.toml")


def test_fpca_settings_default_to_the_paper_and_can_be_set_per_node() -> None:
    text = (
        "[defaults]\nrank = 3\nforget = 0.98\n"
        '[[nodes]]\nid = "root"\n'
        '[[nodes]]\nid = "a"\nparent = "root"\noversample = 4\ncenter = true\n'
        '[[nodes]]\nid = "b"\nparent = "root"\n'
    )
    topology = parse_topology(text)
    a, b = topology.nodes["a"], topology.nodes["b"]
    assert (a.oversample, a.center, a.forget) == (4, True, 0.98)
    assert (b.oversample, b.center, b.forget) == (None, False, 0.98)


@pytest.mark.parametrize(
    ("setting", "needle"),
    [("oversample = -1", "oversample"), ("forget = 0.0", "forget"), ("forget = 1.5", "forget"),
     ("center = 1", "center")],
)  # fmt: skip
def test_bad_fpca_settings_name_the_node_and_the_key(setting: str, needle: str) -> None:
    nodes = '[[nodes]]\nid = "root"\n[[nodes]]\nid = "a"\nparent = "root"\n'
    text = f"[defaults]\nrank = 3\n{nodes}{setting}\n"
    with pytest.raises(TopologyError, match=needle) as info:
        parse_topology(text)
    assert "'a'" in str(info.value)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("publish_min_interval_s = -1", "publish_min_interval_s must be a finite number >= 0"),
        ("publish_growth = 0", "publish_growth must be a finite number > 0"),
        (
            "publish_min_interval_s = 2\npublish_max_interval_s = 1",
            "publish_max_interval_s (1.0) must be >= publish_min_interval_s (2.0)",
        ),
    ],
)
def test_publish_policy_keys_are_checked_with_the_node_named(keys: str, expected: str) -> None:
    text = (
        'name = "t"\n[defaults]\nrank = 2\n[[nodes]]\nid = "root"\n'
        f'[[nodes]]\nid = "leaf"\nparent = "root"\n{keys}\n'
    )
    with pytest.raises(TopologyError, match=re.escape(expected)) as info:
        parse_topology(text)
    assert "'leaf'" in str(info.value)


def test_publish_policy_keys_override_the_role_defaults() -> None:
    from edge_runtime.agents.common.core.node import publish_policy_for
    from edge_runtime.agents.common.core.policy import AGGREGATOR_PUBLISH, LEAF_PUBLISH

    text = (
        'name = "t"\n[defaults]\nrank = 2\npublish_max_interval_s = 7\n'
        '[[nodes]]\nid = "root"\n[[nodes]]\nid = "leaf"\nparent = "root"\nidle_flush_s = 0.3\n'
    )
    topo = parse_topology(text)
    leaf = publish_policy_for(topo.nodes["leaf"], leaf=True)
    root = publish_policy_for(topo.nodes["root"], leaf=False)
    assert (leaf.max_interval_s, leaf.idle_s) == (7.0, 0.3)
    assert leaf.min_interval_s == LEAF_PUBLISH.min_interval_s
    assert (root.max_interval_s, root.idle_s) == (7.0, AGGREGATOR_PUBLISH.idle_s)


# ------------------------------------------------------------ local sensor sources
_SOURCE_TREE = """
[defaults]
rank = 2
[[nodes]]
id = "root"
[[nodes]]
id = "site"
parent = "root"
{site}
[[nodes]]
id = "pi-07"
parent = "site"
{leaf}
"""


def _source_tree(leaf: str = "", site: str = "", defaults: str = "") -> str:
    text = _SOURCE_TREE.format(leaf=leaf, site=site)
    return text.replace("rank = 2", f"rank = 2\n{defaults}") if defaults else text


def test_a_leaf_source_is_parsed_and_a_relative_path_resolves_against_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(_source_tree(leaf='source = { kind = "file", path = "data/pi.csv" }'))
    node = load_topology(path).nodes["pi-07"]
    assert node.source is not None and node.source.kind == "file" and node.source.is_local
    assert node.source.path == tmp_path / "data" / "pi.csv"
    assert node.sensor_topic == "sensors/pi-07"  # kept, not subscribed
    command = 'source = { kind = "command", command = ["sh", "m.sh"], restart = "never" }'
    spec = parse_topology(_source_tree(leaf=command)).nodes["pi-07"].source
    assert spec is not None and spec.command == ("sh", "m.sh") and spec.restart == "never"


def test_without_a_source_or_with_an_mqtt_one_the_leaf_reads_its_sensor_topic() -> None:
    assert parse_topology(_source_tree()).nodes["pi-07"].source is None
    mqtt = parse_topology(_source_tree(leaf='source = { kind = "mqtt", topic = "bench/3" }'))
    assert mqtt.nodes["pi-07"].source is None
    assert mqtt.nodes["pi-07"].sensor_topic == "bench/3"
    plain = parse_topology(_source_tree(leaf='source = { kind = "mqtt" }'))
    assert plain.nodes["pi-07"].sensor_topic == "sensors/pi-07"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"site": 'source = { kind = "file", path = "x.csv" }'},
            r"^node 'site' has children, so it is an aggregator and must not have a source",
        ),
        (
            {"defaults": 'source = { kind = "file", path = "x.csv" }'},
            r"^\[defaults\]: source cannot have a default",
        ),
        ({"leaf": 'source = { kind = "usb" }'}, r"^node 'pi-07': source key 'kind' is 'usb'"),
        (
            {"leaf": 'source = { kind = "file" }'},
            r"^node 'pi-07': source of kind \"file\" needs key 'path'",
        ),
        ({"leaf": 'source = "x.csv"'}, r"^node 'pi-07': source must be a table"),
        (
            {"leaf": 'source = { kind = "file", path = "x", baudrate = 9600 }'},
            r"^node 'pi-07': unknown source key 'baudrate'",
        ),
        (
            {"leaf": 'sensor_topic = "s/x"\nsource = { kind = "file", path = "x" }'},
            r"^node 'pi-07': a source of kind 'file' replaces sensor_topic",
        ),
        (
            {"leaf": 'sensor_topic = "s/x"\nsource = { kind = "mqtt", topic = "s/y" }'},
            r"^node 'pi-07': sensor_topic 's/x' and source topic 's/y' differ",
        ),
    ],
)
def test_a_bad_source_is_a_one_line_error_naming_the_node(
    kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(TopologyError, match=message) as info:
        parse_topology(_source_tree(**kwargs))
    assert "\n" not in str(info.value)


def test_a_node_config_refuses_an_mqtt_spec_as_source() -> None:
    from edge_runtime.sources import SourceSpec

    with pytest.raises(TopologyError, match="node 'a': source must be a local SourceSpec"):
        NodeConfig("a", None, rank=1, source=SourceSpec(kind="mqtt"))


# ------------------------------------------------------------------------------ fedpower
_FP_TREE = """
[defaults]
rank = 2
[[nodes]]
id = "root"
[[nodes]]
id = "a"
parent = "root"
[[nodes]]
id = "b"
parent = "root"
"""


def test_fedpower_defaults_and_keys():
    from edge_runtime.topology import FedPowerConfig, parse_topology

    assert parse_topology(_FP_TREE).algorithm == "fpca"
    t = parse_topology('algorithm = "fedpower"\n' + _FP_TREE)
    assert t.algorithm == "fedpower" and t.fedpower == FedPowerConfig()
    assert t.fedpower.quorum_of(2) == 2
    t = parse_topology(
        'algorithm = "fedpower"\nfedpower_quorum = 0.5\nfedpower_local_steps = 1\n'
        'fedpower_decay = "none"\nfedpower_opt = false\n' + _FP_TREE
    )
    assert t.fedpower.quorum_of(2) == 1 and not t.fedpower.opt
    assert t.round_topic() == "fpca/root/round" and t.reply_topic("a") == "fpca/root/a/reply"
    assert load_topology(Path("topologies/motes-light-fedpower.toml")).algorithm == "fedpower"


@pytest.mark.parametrize(
    ("head", "message"),
    [
        ('algorithm = "pca"', "unknown algorithm"),
        ("fedpower_local_steps = 2", 'needs algorithm = "fedpower"'),
        ('algorithm = "fedpower"\nfedpower_local_steps = 0', "fedpower_local_steps must be >= 1"),
        ('algorithm = "fedpower"\nfedpower_quorum = 3', "exceeds the number of leaves 2"),
        ('algorithm = "fedpower"\nfedpower_quorum = 1.5', "fedpower_quorum must be"),
        ('algorithm = "fedpower"\nfedpower_round_timeout_s = 0', "fedpower_round_timeout_s"),
        ('algorithm = "fedpower"\nfedpower_decay = "fast"', "fedpower_decay must be"),
        ('algorithm = "fedpower"\nfedpower_opt = 1', "fedpower_opt must be a boolean"),
    ],
)
def test_fedpower_bad_keys_are_one_line_errors(head, message):
    from edge_runtime.topology import parse_topology

    with pytest.raises(TopologyError, match=message) as info:
        parse_topology(head + "\n" + _FP_TREE)
    assert "\n" not in str(info.value)


_FP_PRIVATE = "[defaults]\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 4.0\n"


def test_fedpower_private_leaves_get_the_fedpower_mechanism_and_a_budget_horizon():
    from edge_runtime.fedpower.accounting import MECHANISM
    from edge_runtime.topology import parse_topology

    t = parse_topology(
        'algorithm = "fedpower"\nfedpower_rounds = 3\nfedpower_local_steps = 4\n'
        + _FP_TREE.replace("[defaults]\n", _FP_PRIVATE)
    )
    for leaf in ("a", "b"):
        node = t.nodes[leaf]
        assert node.mechanism == MECHANISM and node.release_horizon is None
        assert (node.epsilon, node.delta, node.clip_norm) == (1.0, 1e-5, 4.0)
    assert t.nodes["root"].epsilon is None
    assert t.fedpower.total_iterations == 4 + 2 + 1  # exponential decay, 3 rounds
    linear = parse_topology(
        'algorithm = "fedpower"\nfedpower_rounds = 5\nfedpower_local_steps = 3\n'
        'fedpower_decay = "linear"\n' + _FP_TREE
    )
    assert linear.fedpower.total_iterations == 3 + 2 + 1 + 1 + 1
    assert parse_topology('algorithm = "fedpower"\n' + _FP_TREE).fedpower.total_iterations is None
    shipped = load_topology(Path("topologies/motes-light-fedpower-private.toml"))
    assert shipped.fedpower.total_iterations == 2
    assert all(shipped.nodes[leaf].mechanism == MECHANISM for leaf in shipped.leaves())


@pytest.mark.parametrize(
    ("head", "keys", "message"),
    [
        ('algorithm = "fedpower"', "", "needs a bounded schedule \\(fedpower_rounds > 0\\)"),
        (
            'algorithm = "fedpower"\nfedpower_rounds = 2',
            'mechanism = "fpca-eq8"\n',
            "mechanism 'fpca-eq8' is FPCA's",
        ),
        ('algorithm = "fedpower"\nfedpower_rounds = 2', "forget = 0.5\n", "forget is not used"),
        ("", 'mechanism = "fedpower-gaussian-rdp"\n', 'needs algorithm = "fedpower"'),
        ('algorithm = "fedpower"\nfedpower_rounds = 2', "chunk_size = 4\n", "chunk_size is only"),
    ],
)
def test_fedpower_privacy_errors_are_one_line(head, keys, message):
    from edge_runtime.topology import parse_topology

    text = head + "\n" + _FP_TREE.replace("[defaults]\n", _FP_PRIVATE + keys)
    with pytest.raises(TopologyError, match=message) as info:
        parse_topology(text)
    assert "\n" not in str(info.value)
