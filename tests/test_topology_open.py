"""Open aggregators in the topology file (issue 23): ``open = true`` and ``[nodes.admit]``,
the settings of the leaves an open aggregator admits at run time."""

from __future__ import annotations

import pytest

from edge_runtime.topology import NodeConfig, Topology, TopologyError, parse_topology

OPEN_SITE = """
name = "fleet"
[defaults]
rank = 4
valid_range = [0, 100]
max_reading_rate = 5
[[nodes]]
id = "root"
[[nodes]]
id = "site-a"
parent = "root"
open = true
[nodes.admit]
valid_range = [[0, 0], [10, 20]]
block_size = 40
[[nodes]]
id = "pi-01"
parent = "site-a"
[[nodes]]
id = "site-b"
parent = "root"
open = true
"""


def test_an_open_aggregator_admits_leaves_with_defaults_overridden_by_its_admit_table() -> None:
    topology = parse_topology(OPEN_SITE)

    assert topology.is_open("site-a") and not topology.is_open("root")
    leaf = topology.admitted_leaf("site-a", "pi-09")
    assert (leaf.id, leaf.parent, leaf.sensor_topic) == ("pi-09", "site-a", "sensors/pi-09")
    assert leaf.valid_range == ((0.0, 0.0), (10.0, 20.0))  # [nodes.admit]
    assert (leaf.rank, leaf.block_size, leaf.max_reading_rate) == (4, 40, 5.0)  # [defaults]
    assert dict(topology.admit["site-a"]) == {
        "rank": 4,
        "valid_range": ((0.0, 0.0), (10.0, 20.0)),
        "max_reading_rate": 5.0,
        "block_size": 40,
    }


def test_an_open_aggregator_without_declared_children_is_an_aggregator_not_a_leaf() -> None:
    topology = parse_topology(OPEN_SITE)

    assert not topology.is_leaf("site-b")
    assert topology.children("site-b") == []
    assert topology.leaves() == ["pi-01"]
    assert topology.aggregators() == ["root", "site-a", "site-b"]
    assert topology.admitted_leaf("site-b", "pi-20").valid_range == (0.0, 100.0)
    assert topology.nodes["site-b"].sensor_topic is None


def test_an_open_root_needs_no_declared_leaf_but_cannot_deal_a_dataset() -> None:
    topology = parse_topology('[defaults]\nrank = 2\n[[nodes]]\nid = "root"\nopen = true\n')

    assert topology.leaves() == [] and topology.aggregators() == ["root"]
    with pytest.raises(ValueError, match="declares no leaf"):
        topology.split_rows(10)
    with pytest.raises(TopologyError, match=r"root 'root' has no children.*open root"):
        parse_topology('[defaults]\nrank = 2\n[[nodes]]\nid = "root"\n')


def test_a_closed_aggregator_admits_no_leaf() -> None:
    topology = parse_topology(OPEN_SITE)

    with pytest.raises(TopologyError, match="node 'root' is not open"):
        topology.admitted_leaf("root", "pi-09")
    with pytest.raises(TopologyError, match="unknown node 'nowhere'"):
        topology.admitted_leaf("nowhere", "pi-09")
    with pytest.raises(TopologyError, match="node id 'a/b'"):
        topology.admitted_leaf("site-a", "a/b")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("open = true\n[nodes.admit]", "[nodes.admit]"), "an admit table needs open = true"),
        (("block_size = 40", "noise_seed = 4"), "noise_seed cannot be set for the leaves"),
        (("block_size = 40", "sensor_topic = 'x'"), "sensor_topic cannot be set"),
        (("block_size = 40", "blocksize = 40"), "unknown key 'blocksize'.*did you mean"),
        (("block_size = 40", "block_size = 'big'"), "block_size must be an integer"),
        (("block_size = 40", "max_reading_rate = -1"), r"\[nodes.admit\] of node 'site-a': max"),
        (("block_size = 40", "epsilon = 1.0"), "delta is missing"),
        (("open = true\n[nodes.admit]", "open = 1\n[nodes.admit]"), "open must be a boolean"),
        (("[defaults]", "[defaults]\nopen = true"), r"\[defaults\]: open cannot have a default"),
        (('name = "fleet"', 'name = "fleet"\nalgorithm = "fedpower"'), 'needs algorithm = "fpca"'),
    ],
)
def test_invalid_open_and_admit_settings_are_one_line_errors(
    change: tuple[str, str], message: str
) -> None:
    old, new = change
    assert old in OPEN_SITE

    with pytest.raises(TopologyError, match=message):
        parse_topology(OPEN_SITE.replace(old, new, 1))


def test_a_topology_built_directly_checks_and_normalises_its_admit_settings() -> None:
    nodes = {
        "root": NodeConfig(id="root", parent=None, rank=3, open=True),
        "pi-01": NodeConfig(id="pi-01", parent="root", rank=3, sensor_topic="s/1"),
    }
    topology = Topology(
        name="t", prefix="p", nodes=nodes, root="root", admit={"root": {"valid_range": [0, 9]}}
    )

    assert dict(topology.admit["root"]) == {"valid_range": (0.0, 9.0)}
    assert topology.admitted_leaf("root", "x").rank == 3  # the aggregator's rank
    assert hash(topology) == hash(
        Topology(name="t", prefix="p", nodes=nodes, root="root", admit=topology.admit)
    )
    with pytest.raises(TopologyError, match="need an open aggregator"):
        Topology(name="t", prefix="p", nodes=nodes, root="root", admit={"pi-01": {}})
    with pytest.raises(TopologyError, match="unknown key 'colour'"):
        Topology(name="t", prefix="p", nodes=nodes, root="root", admit={"root": {"colour": 1}})
