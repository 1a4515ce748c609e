"""Home Assistant MQTT discovery messages, validated against Home Assistant's documented schema.

The schema below is transcribed from the Home Assistant documentation (and nothing else):

- MQTT discovery, https://www.home-assistant.io/integrations/mqtt/ ("Discovery messages"):
  topic ``<discovery_prefix>/<component>/[<node_id>/]<object_id>/config``; ``<node_id>`` and
  ``<object_id>`` only of the character class ``[a-zA-Z0-9_-]``; best practice for entities
  with a ``unique_id``: ``<object_id>`` = ``unique_id``, no ``<node_id>``; the payload is a
  serialized JSON dictionary whose *required* configuration variables must be present
  (unknown keys are ignored, which is why this test also rejects undocumented keys: a typo
  would be dropped silently); an empty (retained) payload removes the entity; ``origin``
  recommended, its ``name`` required.
- MQTT sensor, https://www.home-assistant.io/integrations/sensor.mqtt/ and MQTT binary sensor,
  https://www.home-assistant.io/integrations/binary_sensor.mqtt/ ("Configuration Variables"):
  ``state_topic`` required; ``platform`` only allowed in device-based discovery;
  ``device`` only works when ``unique_id`` is set and needs at least one of ``identifiers`` /
  ``connections``; ``availability`` is a list whose entries require ``topic`` (and must not
  be combined with ``availability_topic``); ``entity_category``, when set, must be
  ``diagnostic``; ``last_reset_value_template`` needs ``state_class`` ``total``; ``options``
  needs ``device_class`` ``enum`` and excludes ``state_class`` and ``unit_of_measurement``.
- State classes, https://developers.home-assistant.io/docs/core/entity/sensor#available-state-classes
  (``measurement``, ``total``, ``total_increasing``); binary sensor device classes,
  https://www.home-assistant.io/integrations/binary_sensor/#device-class.

jinja2 is not installed in the project's environment, so the value templates are checked by
the fields they reference against a status document made by the real encoder
(`edge_runtime.wire.encode_status`); where jinja2 is importable they are also rendered.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from edge_runtime import __version__
from edge_runtime.agents.common.shell.agent import OFFLINE, ONLINE
from edge_runtime.homeassistant import (
    DEFAULT_DISCOVERY_PREFIX,
    ENTITY_KEYS,
    device_identifier,
    discovery_messages,
    discovery_removals,
    unique_id,
)
from edge_runtime.topology import Topology, load_topology, parse_topology
from edge_runtime.wire import PrivacyStatus, StatusDetail, encode_status

MOTES = Path(__file__).resolve().parent.parent / "topologies" / "motes-light.toml"

# ---------------------------------------------------------------------------------------------
# The documented schema

_ID = r"[a-zA-Z0-9_-]+"
ID_RE = re.compile(rf"^{_ID}$")

STATE_CLASSES = frozenset({"measurement", "total", "total_increasing"})
ENTITY_CATEGORIES = frozenset({"diagnostic"})  # "must be `diagnostic` for sensors"
BINARY_SENSOR_DEVICE_CLASSES = frozenset(
    {
        "battery",
        "battery_charging",
        "carbon_monoxide",
        "cold",
        "connectivity",
        "door",
        "garage_door",
        "gas",
        "heat",
        "light",
        "lock",
        "moisture",
        "motion",
        "moving",
        "occupancy",
        "opening",
        "plug",
        "power",
        "presence",
        "problem",
        "running",
        "safety",
        "smoke",
        "sound",
        "tamper",
        "update",
        "vibration",
        "window",
    }
)

# Configuration variables common to both platforms (documented types), plus ``origin`` from
# the discovery payload section. ``platform`` is documented but only allowed in device-based
# discovery, so it is not accepted here.
_COMMON_KEYS: dict[str, type | tuple[type, ...]] = {
    "availability": list,
    "availability_mode": str,
    "availability_template": str,
    "availability_topic": str,
    "device": dict,
    "device_class": (str, type(None)),
    "enabled_by_default": bool,
    "encoding": str,
    "entity_category": str,
    "entity_picture": str,
    "expire_after": int,
    "force_update": bool,
    "icon": str,
    "json_attributes_template": str,
    "json_attributes_topic": str,
    "name": (str, type(None)),
    "object_id": str,
    "payload_available": str,
    "payload_not_available": str,
    "qos": int,
    "state_topic": str,
    "unique_id": str,
    "value_template": str,
    "origin": dict,
}
SCHEMA: dict[str, dict[str, Any]] = {
    "sensor": {
        "required": {"state_topic"},
        "keys": {
            **_COMMON_KEYS,
            "last_reset_value_template": str,
            "options": list,
            "state_class": str,
            "suggested_display_precision": int,
            "unit_of_measurement": (str, type(None)),
        },
    },
    "binary_sensor": {
        "required": {"state_topic"},
        "keys": {
            **_COMMON_KEYS,
            "off_delay": int,
            "payload_off": str,
            "payload_on": str,
        },
    },
}
DEVICE_KEYS = {
    "configuration_url": str,
    "connections": list,
    "hw_version": str,
    "identifiers": (list, str),
    "manufacturer": str,
    "model": str,
    "model_id": str,
    "name": str,
    "serial_number": str,
    "suggested_area": str,
    "sw_version": str,
    "via_device": str,
}
ORIGIN_KEYS = {"name": str, "sw_version": str, "support_url": str}
AVAILABILITY_KEYS = {
    "topic": str,
    "payload_available": str,
    "payload_not_available": str,
    "value_template": str,
}


def _subscribe_topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a valid MQTT topic filter (MQTT 3.1.1 section 4.7), or None."""
    if topic == "" or "\x00" in topic or len(topic.encode("utf-8")) > 65535:
        return "empty, NUL or longer than 65535 bytes"
    levels = topic.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return "'#' not as the whole last level"
        if "+" in level and level != "+":
            return "'+' not as a whole level"
    return None


def _check_keys(where: str, mapping: dict[str, Any], keys: dict[str, Any]) -> list[str]:
    problems = []
    for key, value in mapping.items():
        if key not in keys:
            problems.append(f"{where}: undocumented key {key!r}")
        elif not isinstance(value, keys[key]) or isinstance(value, bool) != (keys[key] is bool):
            problems.append(f"{where}: {key} has type {type(value).__name__}")
    return problems


def schema_problems(topic: str, payload: bytes, discovery_prefix: str) -> list[str]:
    """Every way one discovery message breaks the documented schema (empty when valid)."""
    match = re.fullmatch(
        rf"{re.escape(discovery_prefix)}/(?P<component>[a-z_]+)/(?:(?P<node_id>{_ID})/)?"
        rf"(?P<object_id>{_ID})/config",
        topic,
    )
    if match is None:
        return [f"{topic}: not <discovery_prefix>/<component>/[<node_id>/]<object_id>/config"]
    component = match["component"]
    if component not in SCHEMA:
        return [f"{topic}: component {component!r} not covered"]
    try:
        config = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [f"{topic}: payload is not UTF-8 JSON: {exc}"]
    if not isinstance(config, dict):
        return [f"{topic}: payload is not a JSON dictionary"]
    schema = SCHEMA[component]
    problems = _check_keys(topic, config, schema["keys"])
    problems += [f"{topic}: required {k!r} missing" for k in schema["required"] - set(config)]

    uid = config.get("unique_id")
    if not uid:
        problems.append(f"{topic}: no unique_id (the device block only works with one)")
    elif match["object_id"] != uid or match["node_id"] is not None:
        problems.append(f"{topic}: best practice is <object_id> = unique_id without <node_id>")

    device = config.get("device")
    if not isinstance(device, dict):
        problems.append(f"{topic}: no device block")
    else:
        problems += _check_keys(f"{topic} device", device, DEVICE_KEYS)
        if not (device.get("identifiers") or device.get("connections")):
            problems.append(f"{topic}: device has neither identifiers nor connections")
        ids = device.get("identifiers")
        if isinstance(ids, list) and not all(isinstance(i, str) and i for i in ids):
            problems.append(f"{topic}: device identifiers must be non-empty strings")

    origin = config.get("origin")
    if not isinstance(origin, dict) or not isinstance(origin.get("name"), str):
        problems.append(f"{topic}: origin (recommended) must have a name")
    else:
        problems += _check_keys(f"{topic} origin", origin, ORIGIN_KEYS)

    if "availability" in config:
        if "availability_topic" in config:
            problems.append(f"{topic}: availability together with availability_topic")
        for entry in config["availability"]:
            if not isinstance(entry, dict) or "topic" not in entry:
                problems.append(f"{topic}: availability entry without topic")
            else:
                problems += _check_keys(f"{topic} availability", entry, AVAILABILITY_KEYS)

    for key in ("state_topic", "json_attributes_topic", "availability_topic"):
        if isinstance(config.get(key), str) and _subscribe_topic_problem(config[key]):
            problems.append(f"{topic}: {key} is not a valid topic")
    for entry in config.get("availability", []):
        topic_of_entry = entry.get("topic") if isinstance(entry, dict) else None
        if isinstance(topic_of_entry, str) and _subscribe_topic_problem(topic_of_entry):
            problems.append(f"{topic}: availability topic is not a valid topic")

    if config.get("qos", 0) not in (0, 1, 2):
        problems.append(f"{topic}: qos must be 0, 1 or 2")
    category = config.get("entity_category")
    if category is not None and category not in ENTITY_CATEGORIES:
        problems.append(f"{topic}: entity_category {category!r} must be 'diagnostic'")

    if component == "sensor":
        state_class = config.get("state_class")
        if state_class is not None and state_class not in STATE_CLASSES:
            problems.append(f"{topic}: state_class {state_class!r} not documented")
        if "last_reset_value_template" in config and state_class != "total":
            problems.append(f"{topic}: last_reset_value_template needs state_class total")
        if "options" in config and (
            config.get("device_class") != "enum"
            or "state_class" in config
            or "unit_of_measurement" in config
        ):
            problems.append(f"{topic}: options needs device_class enum, no state/unit")
        if config.get("suggested_display_precision", 0) < 0:
            problems.append(f"{topic}: suggested_display_precision < 0")
    else:
        device_class = config.get("device_class")
        if device_class is not None and device_class not in BINARY_SENSOR_DEVICE_CLASSES:
            problems.append(f"{topic}: binary_sensor device_class {device_class!r} unknown")
    return problems


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def motes() -> Topology:
    return load_topology(MOTES)


def _configs(messages: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [json.loads(payload) for _, payload in messages]


def _tree(name: str = "demo", prefix: str = "fpca", leaves: tuple[str, ...] = ("a", "b")) -> str:
    nodes = '[[nodes]]\nid = "root"\n' + "".join(
        f'[[nodes]]\nid = "{leaf}"\nparent = "root"\n' for leaf in leaves
    )
    return f'name = "{name}"\nprefix = "{prefix}"\n[defaults]\nrank = 2\n{nodes}'


def _sample_status(**extra: object) -> dict[str, Any]:
    """A status document as the agents publish it, through the real encoder."""
    detail = StatusDetail(
        node_id="pi-01",
        role="leaf",
        online=True,
        rank=4,
        n_samples=1234,
        seq=7,
        epoch="e1",
        rejects={},
        uptime_s=12.5,
        extra=extra,
        privacy=PrivacyStatus(epsilon=1.0, delta=1e-5, clip_norm=1.0, releases=3),
    )
    return json.loads(encode_status(detail))


# ---------------------------------------------------------------------------------------------
# The Motes tree against the schema


def test_every_motes_message_satisfies_the_documented_schema(motes: Topology) -> None:
    messages = discovery_messages(motes)
    assert len(motes.nodes) == 11
    assert len(messages) == 11 * len(ENTITY_KEYS)
    problems = [p for t, pl in messages for p in schema_problems(t, pl, DEFAULT_DISCOVERY_PREFIX)]
    assert problems == []


def test_the_schema_check_catches_broken_messages(motes: Topology) -> None:
    topic, payload = discovery_messages(motes, node_ids=["pi-01"])[1]
    config = json.loads(payload)
    broken = {
        "no state_topic": {k: v for k, v in config.items() if k != "state_topic"},
        "no identifiers": {**config, "device": {"name": "x"}},
        "typo": {**config, "unit_of_measure": "%"},
        "bad state_class": {**config, "state_class": "measurements"},
        "bad category": {**config, "entity_category": "config"},
        "availability without topic": {**config, "availability": [{"payload_available": "x"}]},
        "wildcard topic": {**config, "state_topic": "fpca/+x/status"},
        "platform": {**config, "platform": "sensor"},
    }
    for what, bad in broken.items():
        assert schema_problems(topic, json.dumps(bad).encode(), "homeassistant"), what
    bad_topic = topic.replace("/config", "/cfg")
    assert schema_problems(bad_topic, payload, "homeassistant")
    assert schema_problems(topic.replace("pi-01", "pi.01"), payload, "homeassistant")


def test_each_node_is_a_device_linked_to_its_parent(motes: Topology) -> None:
    messages = discovery_messages(motes)
    devices: dict[str, dict[str, Any]] = {}
    order = []
    for config in _configs(messages):
        (identifier,) = config["device"]["identifiers"]
        assert devices.setdefault(identifier, config["device"]) == config["device"]
        if identifier not in order:
            order.append(identifier)
    assert len(devices) == 11
    by_node = {node: device_identifier(motes, node) for node in motes.nodes}
    assert set(devices) == set(by_node.values())
    for node, identifier in by_node.items():
        device = devices[identifier]
        parent = motes.nodes[node].parent
        if parent is None:
            assert "via_device" not in device
        else:
            assert device["via_device"] == by_node[parent]
            assert order.index(by_node[parent]) < order.index(identifier)  # parents first
        assert device["name"] == f"motes-light {node}"
        assert device["sw_version"] == __version__
    assert devices[by_node["root"]]["model"].endswith("root")
    assert devices[by_node["site-a"]]["model"].endswith("aggregator")
    assert devices[by_node["pi-01"]]["model"].endswith("leaf")


def test_entities_read_the_nodes_topics(motes: Topology) -> None:
    for node in motes.nodes:
        configs = {c["name"]: c for c in _configs(discovery_messages(motes, node_ids=[node]))}
        assert set(configs) == {
            "Online",
            "Samples",
            "Rank",
            "Anomaly rate",
            "Last Q",
            "Sensor fault",
            "Suspected sensor",
            "Privacy",
        }
        online = configs.pop("Online")
        assert online["state_topic"] == motes.status_topic(node)
        assert online["device_class"] == "connectivity"
        assert (online["payload_on"], online["payload_off"]) == (ONLINE.decode(), OFFLINE.decode())
        assert "availability" not in online  # offline shows as "off", not "unavailable"
        for config in configs.values():
            assert config["state_topic"] == motes.status_detail_topic(node)
            assert config["availability"] == [
                {
                    "topic": motes.status_topic(node),
                    "payload_available": ONLINE.decode(),
                    "payload_not_available": OFFLINE.decode(),
                }
            ]
        assert configs["Anomaly rate"]["unit_of_measurement"] == "%"
        assert configs["Samples"]["state_class"] == "total"
        assert configs["Privacy"]["json_attributes_topic"] == motes.status_detail_topic(node)
        assert configs["Sensor fault"]["device_class"] == "problem"
        for name in ("Sensor fault", "Suspected sensor"):
            assert configs[name]["json_attributes_topic"] == motes.status_detail_topic(node)


def test_ids_are_unique_stable_and_in_the_documented_charset(motes: Topology) -> None:
    messages = discovery_messages(motes)
    uids = [c["unique_id"] for c in _configs(messages)]
    assert len(set(uids)) == len(uids) == len({t for t, _ in messages})
    assert all(
        ID_RE.match(uid) and uid.startswith("edge_runtime_motes-light_fpca_") for uid in uids
    )
    # Pinned: a change renames every entity in users' Home Assistant.
    assert device_identifier(motes, "root") == "edge_runtime_motes-light_fpca_0fe0cd_root"
    assert unique_id(motes, "pi-01", "rank") == "edge_runtime_motes-light_fpca_0fe0cd_pi-01_rank"
    assert discovery_messages(load_topology(MOTES)) == messages


def test_node_ids_outside_the_charset_get_distinct_valid_ids() -> None:
    topology = parse_topology(_tree(leaves=("pi.01", "pi_01", "pi 01", "café")))
    messages = discovery_messages(topology)
    assert [p for t, pl in messages for p in schema_problems(t, pl, "homeassistant")] == []
    identifiers = {device_identifier(topology, node) for node in topology.nodes}
    assert len(identifiers) == 5 and all(ID_RE.match(i) for i in identifiers)


# ---------------------------------------------------------------------------------------------
# Templates against the real status document

_FIELD = re.compile(r"value_json\.(?:get\('(\w+)'\)|(\w+))")
_NESTED = {"x": "extra", "p": "privacy"}


def _referenced(template: str) -> set[tuple[str, ...]]:
    """The status-document paths a template reads: ``value_json.f``, ``value_json.get('f')``
    and ``x.get('g')`` / ``p.get('g')`` for the ``extra`` / ``privacy`` maps."""
    paths = {(a or b,) for a, b in _FIELD.findall(template)}
    for var, parent in _NESTED.items():
        paths |= {(parent, g) for g in re.findall(rf"\b{var}\.get\('(\w+)'", template)}
    return paths


SUSPECT = {"sensor": 17, "fault": "short", "seq": 3207, "ts": 1732421712.125}


def test_templates_reference_fields_of_the_status_document(motes: Topology) -> None:
    document = _sample_status(anomaly_rate=0.0125, last_q=3.5, suspect=SUSPECT)
    for config in _configs(discovery_messages(motes, node_ids=["pi-01"])):
        for key in ("value_template", "json_attributes_template"):
            template = config.get(key)
            if template is None:
                continue
            assert template.count("{{") == template.count("}}") >= 1, template
            assert template.count("{%") == template.count("%}"), template
            paths = _referenced(template)
            assert paths, template
            for path in paths:
                value: Any = document
                for part in path:
                    assert isinstance(value, dict) and part in value, (config["name"], path)
                    value = value[part]
    expected = {("n_samples",), ("rank",), ("extra", "anomaly_rate"), ("extra", "last_q")}
    expected |= {("privacy", "mechanism"), ("extra", "suspect")}
    found = set().union(
        *(_referenced(c.get("value_template", "")) for c in _configs(discovery_messages(motes)))
    )
    assert expected <= found


def test_templates_render_with_jinja2_where_installed(motes: Topology) -> None:
    jinja_sandbox = pytest.importorskip("jinja2.sandbox")
    env = jinja_sandbox.ImmutableSandboxedEnvironment()
    configs = {c["name"]: c for c in _configs(discovery_messages(motes, node_ids=["pi-01"]))}

    def render(name: str, document: dict[str, Any], key: str = "value_template") -> str:
        return env.from_string(configs[name][key]).render(value_json=document).strip()

    full = _sample_status(anomaly_rate=0.0125, last_q=3.5)
    assert render("Samples", full) == "1234"
    assert render("Rank", full) == "4"
    assert render("Anomaly rate", full) == "1.25"
    assert render("Last Q", full) == "3.5"
    assert render("Privacy", full) == "gaussian"
    assert json.loads(render("Privacy", full, "json_attributes_template"))["epsilon"] == 1.0
    bare = {**_sample_status(), "privacy": None}
    assert render("Anomaly rate", bare) == render("Last Q", bare) == "None"  # state "unknown"
    assert render("Privacy", bare) == "off"
    assert render("Sensor fault", bare) == render("Suspected sensor", bare) == "None"
    alarm = _sample_status(anomaly_rate=0.01, suspect=SUSPECT)
    assert render("Sensor fault", alarm) == "ON"  # the problem binary sensor's payload_on
    assert render("Suspected sensor", alarm) == "17"
    for name in ("Sensor fault", "Suspected sensor"):
        assert json.loads(render(name, alarm, "json_attributes_template")) == SUSPECT
    quiet = _sample_status(anomaly_rate=0.0, suspect=None)
    assert render("Sensor fault", quiet) == "OFF"
    assert render("Suspected sensor", quiet) == "none"
    assert json.loads(render("Suspected sensor", quiet, "json_attributes_template")) == {}


# ---------------------------------------------------------------------------------------------
# Removal, selection, two deployments, errors


def test_removals_are_empty_payloads_for_the_same_topics(motes: Topology) -> None:
    messages = discovery_messages(motes, discovery_prefix="ha/disc")
    removals = discovery_removals(motes, discovery_prefix="ha/disc")
    assert [t for t, _ in removals] == [t for t, _ in messages]
    assert all(payload == b"" for _, payload in removals)
    assert all(t.startswith("ha/disc/") for t, _ in removals)
    assert [p for t, pl in messages for p in schema_problems(t, pl, "ha/disc")] == []


def test_node_ids_select_one_agents_own_messages(motes: Topology) -> None:
    everything = discovery_messages(motes)
    own = discovery_messages(motes, node_ids=["pi-05"])
    assert len(own) == len(ENTITY_KEYS)
    assert set(own) <= set(everything)
    pair = discovery_messages(motes, node_ids=iter(["pi-05", "root", "pi-05"]))
    assert pair == discovery_messages(motes, node_ids=["root"]) + own  # tree order, no repeats
    assert discovery_removals(motes, node_ids=["pi-05"]) == [(t, b"") for t, _ in own]
    assert discovery_messages(motes, node_ids=[]) == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("motes-light", "fpca"), ("motes-light-2", "fpca")),
        (("motes-light", "fpca"), ("motes-light", "lab/fpca")),
        (("a_b", "c"), ("a", "b_c")),  # same characters once joined
        (("a.b", "fpca"), ("a_b", "fpca")),  # same once slugged
    ],
)
def test_two_deployments_do_not_collide(first: tuple[str, str], second: tuple[str, str]) -> None:
    one, two = (parse_topology(_tree(name, prefix)) for name, prefix in (first, second))
    m1, m2 = discovery_messages(one), discovery_messages(two)
    assert not {t for t, _ in m1} & {t for t, _ in m2}
    ids1 = {c["unique_id"] for c in _configs(m1)} | {device_identifier(one, n) for n in one.nodes}
    ids2 = {c["unique_id"] for c in _configs(m2)} | {device_identifier(two, n) for n in two.nodes}
    assert not ids1 & ids2


@pytest.mark.parametrize("prefix", ["", "ha/", "/ha", "ha//x", "ha/+", "ha/#", "h\x00a"])
def test_invalid_discovery_prefix_is_a_one_line_value_error(motes: Topology, prefix: str) -> None:
    with pytest.raises(ValueError, match="discovery_prefix") as info:
        discovery_messages(motes, discovery_prefix=prefix)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="discovery_prefix"):
        discovery_removals(motes, discovery_prefix=prefix, node_ids=[])


def test_unknown_nodes_and_entities_are_one_line_value_errors(motes: Topology) -> None:
    for call in (
        lambda: discovery_messages(motes, node_ids=["pi-99"]),
        lambda: discovery_removals(motes, node_ids=["root", "nope"]),
        lambda: discovery_messages(motes, node_ids="pi-01"),  # a string, not a list of ids
        lambda: device_identifier(motes, "pi-99"),
        lambda: unique_id(motes, "pi-01", "temperature"),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert "\n" not in str(info.value)
