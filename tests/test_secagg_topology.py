"""Secure-aggregation sites in the topology, their topics and the ACL (issue 26).

The topology rules (`edge_runtime.topology.secagg`), the topic names, the generated ACL's
sections, and, against a real Mosquitto running the generated ACL, that a sibling leaf
cannot read another leaf's masked input or share delivery while the aggregator can.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest

from edge_runtime.acl import generate_acl
from edge_runtime.broker import LocalMosquitto
from edge_runtime.topology import RESERVED_IDS, TopologyError, load_topology, parse_topology
from edge_runtime.topology import topics as topic_names
from edge_runtime.topology.keys import DEFAULT_SECAGG_SLOT_S

REPO = Path(__file__).resolve().parent.parent
QUIET_S = 1.0


def site_toml(
    n: int = 4,
    *,
    site_keys: str = "",
    leaf_keys: Callable[[int], str] = lambda i: "",
    open_site: bool = False,
) -> str:
    leaves = "".join(
        f'[[nodes]]\nid = "pi-{i}"\nparent = "site"\nmechanism = "gaussian-secagg"\n{leaf_keys(i)}'
        for i in range(n)
    )
    return (
        'name = "secagg"\n[defaults]\nrank = 2\nepsilon = 1.0\ndelta = 1e-5\nclip_norm = 3.0\n'
        '[[nodes]]\nid = "root"\n'
        f'[[nodes]]\nid = "site"\nparent = "root"\n{"open = true" if open_site else ""}\n'
        f"{site_keys}\n{leaves}"
    )


# -- topology -------------------------------------------------------------------------------


def test_a_site_of_four_secagg_leaves_gets_threshold_three_and_the_default_slot() -> None:
    topology = parse_topology(site_toml(4))
    site = topology.nodes["site"]
    assert (site.secagg_threshold, site.secagg_slot_s) == (3, DEFAULT_SECAGG_SLOT_S)
    assert topology.secagg_leaves("site") == ["pi-0", "pi-1", "pi-2", "pi-3"]
    assert topology.secagg_leaves("root") == [] == topology.secagg_leaves("pi-0")
    leaf = topology.nodes["pi-0"]
    assert leaf.mechanism == "gaussian-secagg" and leaf.release_horizon == 64
    assert leaf.privacy is not None and leaf.privacy.mechanism == "gaussian-secagg"


def test_given_threshold_and_slot_are_kept() -> None:
    topology = parse_topology(site_toml(5, site_keys="secagg_threshold = 3\nsecagg_slot_s = 30"))
    assert (topology.nodes["site"].secagg_threshold, topology.nodes["site"].secagg_slot_s) == (
        3,
        30.0,
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (site_toml(2), "node 'site': 2 children of mechanism 'gaussian-secagg' (pi-0, pi-1), "),
        (site_toml(4, site_keys="secagg_threshold = 2"), "secagg_threshold = 2, expected 3 to 4"),
        (site_toml(4, site_keys="secagg_threshold = 5"), "secagg_threshold = 5, expected 3 to 4"),
        (site_toml(4, site_keys="secagg_threshold = 1"), "secagg_threshold must be >= 2"),
        (site_toml(4, site_keys="secagg_slot_s = 1"), "secagg_slot_s must be a finite number >= 2"),
        (
            site_toml(4, leaf_keys=lambda i: "epsilon = 2.0\n" if i == 2 else ""),
            "node 'pi-2': epsilon = 2.0, expected 1.0 as on 'pi-0' (the secagg leaves of 'site'",
        ),
        (
            site_toml(4, leaf_keys=lambda i: "release_horizon = 4\n" if i == 1 else ""),
            "node 'pi-1': release_horizon = 4, expected 64 as on 'pi-0'",
        ),
        (
            site_toml(3, leaf_keys=lambda i: "forget = 0.9\n" if i == 0 else ""),
            "node 'pi-0': forget = 0.9 with mechanism 'gaussian-secagg', expected 1",
        ),
        (site_toml(3, open_site=True), "node 'site': open = true, but its children 'pi-0'"),
        (
            site_toml(3, leaf_keys=lambda i: "secagg_threshold = 2\n" if i == 0 else ""),
            "node 'pi-0': secagg_threshold = 2 is a key of the aggregator that sums",
        ),
        (
            site_toml(3).replace(
                '[[nodes]]\nid = "root"\n', '[[nodes]]\nid = "root"\nsecagg_slot_s = 9\n'
            ),
            "node 'root': secagg_slot_s = 9.0 is only used on an aggregator with leaves of",
        ),
        (
            site_toml(3, leaf_keys=lambda i: "mechanism = 'gaussian-secagg'\nchunk_size = 4\n"),
            "chunk_size is only used with mechanism 'fpca-eq8'",
        ),
    ],
)
def test_secagg_sites_are_checked_with_one_line_errors(toml: str, expected: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(toml.replace('mechanism = "gaussian-secagg"\nmechanism', "mechanism"))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_a_site_has_at_most_max_secagg_leaves() -> None:
    from edge_runtime.wire.secagg_fields import MAX_SECAGG_LEAVES

    parse_topology(site_toml(MAX_SECAGG_LEAVES))
    with pytest.raises(TopologyError, match=r"65 children of mechanism .*, expected at most 64"):
        parse_topology(site_toml(MAX_SECAGG_LEAVES + 1))


def test_secagg_is_a_reserved_id_in_the_topology_and_on_the_wire() -> None:
    from edge_runtime.wire import secagg_fields

    assert "secagg" in RESERVED_IDS
    assert secagg_fields.RESERVED_IDS == RESERVED_IDS
    with pytest.raises(TopologyError, match="secagg"):
        parse_topology(
            site_toml(3)
            .replace('id = "site"', 'id = "secagg"')
            .replace('parent = "site"', 'parent = "secagg"')
        )


def test_secagg_topics_follow_the_node_topic_scheme() -> None:
    topology = parse_topology(site_toml(3))
    assert topology.secagg_topic("pi-1", topic_names.SECAGG_MASKED) == (
        "fpca/root/site/pi-1/secagg/masked"
    )
    assert topology.secagg_topic("site", topic_names.secagg_delivery_kind("pi-1")) == (
        "fpca/root/site/secagg/delivery/pi-1"
    )
    assert topology.secagg_topic("site", topic_names.SECAGG_OUTCOME) == (
        "fpca/root/site/secagg/outcome"
    )
    assert topology.secagg_children_filter("site") == "fpca/root/site/+/secagg/+"


def test_the_motes_secagg_topology_has_two_sites_of_four() -> None:
    topology = load_topology(REPO / "topologies" / "motes-secagg.toml")
    sites = [a for a in topology.aggregators() if topology.secagg_leaves(a)]
    assert [len(topology.secagg_leaves(s)) for s in sites] == [4, 4]
    assert all(topology.nodes[s].secagg_threshold == 3 for s in sites)


# -- ACL ------------------------------------------------------------------------------------


def _section(acl: str, user: str) -> list[str]:
    block = next(b for b in acl.split("\n\n") if f"\nuser {user}\n" in f"\n{b}\n")
    return [line for line in block.splitlines() if line.startswith("topic ")]


def test_the_acl_gives_each_secagg_leaf_its_kinds_and_only_its_own_delivery() -> None:
    topology = parse_topology(site_toml(3))
    acl = generate_acl(topology, readers=["dash"])
    leaf = _section(acl, "pi-0")
    assert [t for t in leaf if "secagg" in t] == [
        "topic write fpca/root/site/pi-0/secagg/keys",
        "topic write fpca/root/site/pi-0/secagg/shares",
        "topic write fpca/root/site/pi-0/secagg/masked",
        "topic write fpca/root/site/pi-0/secagg/unmasked",
        "topic read fpca/root/site/secagg/roster",
        "topic read fpca/root/site/secagg/unmask",
        "topic read fpca/root/site/secagg/outcome",
        "topic read fpca/root/site/secagg/delivery/pi-0",
    ]
    site = _section(acl, "site")
    assert [t for t in site if "secagg" in t] == [
        "topic read fpca/root/site/pi-0/secagg/+",
        "topic read fpca/root/site/pi-1/secagg/+",
        "topic read fpca/root/site/pi-2/secagg/+",
        "topic write fpca/root/site/secagg/roster",
        "topic write fpca/root/site/secagg/delivery/+",
        "topic write fpca/root/site/secagg/unmask",
        "topic readwrite fpca/root/site/secagg/outcome",
    ]
    assert not [t for t in _section(acl, "root") if "secagg" in t]
    dash = _section(acl, "dash")
    assert "topic deny fpca/root/site/pi-1/secagg/masked" in dash
    assert "topic deny fpca/root/site/secagg/delivery/+" in dash


def _mosquitto_passwd() -> str:
    found = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    if not Path(found).exists():
        pytest.skip("mosquitto_passwd not found")
    return found


@pytest.mark.mqtt
async def test_a_sibling_cannot_read_a_leafs_masked_input_or_delivery_and_the_site_can(
    tmp_path: Path, make_mosquitto: Callable[..., LocalMosquitto]
) -> None:
    topology = parse_topology(site_toml(3))
    users = [*topology.nodes, "dash"]
    passwords = {user: secrets.token_urlsafe(12) for user in users}
    password_file = tmp_path / "passwd"
    password_file.write_text("".join(f"{u}:{p}\n" for u, p in passwords.items()))
    password_file.chmod(0o600)
    subprocess.run([_mosquitto_passwd(), "-U", str(password_file)], check=True, timeout=30)
    acl_file = tmp_path / "acl"
    acl_file.write_text(generate_acl(topology, readers=["dash"], replay=None))
    template = tmp_path / "template.conf"
    template.write_text(f"listener 1883\npassword_file {password_file}\nacl_file {acl_file}\n")
    broker = make_mosquitto(template)
    broker.start()

    def client(user: str) -> aiomqtt.Client:
        return aiomqtt.Client(
            broker.host,
            broker.port,
            identifier=f"{user}-{secrets.token_hex(3)}",
            username=user,
            password=passwords[user],
            timeout=5,
        )

    masked = topology.secagg_topic("pi-0", topic_names.SECAGG_MASKED)
    delivery = topology.secagg_topic("site", topic_names.secagg_delivery_kind("pi-0"))
    barrier = topology.secagg_topic("site", topic_names.SECAGG_OUTCOME)

    async def collect(c: aiomqtt.Client, into: list[str]) -> None:
        async for message in c.messages:
            into.append(str(message.topic))
            if str(message.topic) == barrier:
                await asyncio.sleep(QUIET_S)
                return

    async with (
        client("site") as site,
        client("pi-0") as owner,
        client("pi-1") as sibling,
        client("dash") as dash,
    ):
        seen: dict[str, list[str]] = {"site": [], "pi-0": [], "pi-1": [], "dash": []}
        for c in (site, owner, sibling, dash):
            await c.subscribe("fpca/#", qos=1)  # acl_file grants every SUBSCRIBE
        tasks = [
            asyncio.create_task(collect(c, seen[name]))
            for name, c in (("site", site), ("pi-0", owner), ("pi-1", sibling), ("dash", dash))
        ]
        await owner.publish(masked, b"masked", qos=1)
        await site.publish(delivery, b"delivery", qos=1)
        await asyncio.sleep(0.2)
        await site.publish(barrier, b"outcome", qos=1)
        async with asyncio.timeout(10):
            await asyncio.gather(*tasks)
    assert masked in seen["site"]
    assert delivery in seen["pi-0"]
    assert masked not in seen["pi-1"] and delivery not in seen["pi-1"]
    assert masked not in seen["dash"] and delivery not in seen["dash"]
    assert barrier in seen["pi-1"] and barrier in seen["dash"]  # it was delivered at all
