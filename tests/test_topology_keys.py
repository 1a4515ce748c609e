"""Settings declared once: the key table, what is derived from it, and the README reference.

Every topology key is one `Key` of `edge_runtime.topology.keys.TOPOLOGY_KEYS`; `NodeConfig`
and `FedPowerConfig` take their fields and defaults from it, the file's key groups are
derived from it, the README's key tables are generated from it (and must be current), and a
node is validated before it is built (nothing is changed on a frozen instance afterwards).
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from edge_runtime.declaration import Bound, Key, markdown_table
from edge_runtime.topology import FedPowerConfig, NodeConfig, TopologyError, parse_topology
from edge_runtime.topology import keys as topology_keys
from edge_runtime.topology.reference import SECTIONS, render, section_keys

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "topologies" / "README.md"


def test_the_readme_key_reference_is_generated_from_the_declarations_and_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert render(text) == text, "run: python -m edge_runtime.topology.reference"


def test_the_reference_check_command_agrees(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text("<!-- keys:data -->\nold\n<!-- /keys:data -->\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "edge_runtime.topology.reference"]
    check = subprocess.run([*cmd, "--check", str(stale)], capture_output=True, text=True)
    assert check.returncode == 1 and "stale" in check.stderr
    assert subprocess.run([*cmd, str(stale)], timeout=60).returncode == 0
    assert "`split`" in stale.read_text(encoding="utf-8")
    again = subprocess.run([*cmd, "--check", str(stale)], timeout=60)
    assert again.returncode == 0


def test_every_key_is_in_exactly_one_reference_table() -> None:
    placed = [key.name for name in SECTIONS for key in section_keys(name)]
    assert sorted(placed) == sorted(key.name for key in topology_keys.TOPOLOGY_KEYS)
    assert len(placed) == len(set(placed))


def test_node_config_fields_and_defaults_are_the_declared_ones() -> None:
    fields = {f.name: f for f in dataclasses.fields(NodeConfig)}
    declared = [k for k in topology_keys.NODE_FIELDS]
    assert list(fields) == [k.name for k in declared]
    for key in declared:
        default = fields[key.name].default
        assert default is dataclasses.MISSING if key.required else default == key.default
    assert NodeConfig.stale_weight == topology_keys.KEYS["stale_weight"].default
    assert "stale_weight : number in (0, 1), default 0.5" in (NodeConfig.__doc__ or "")


def test_fedpower_config_fields_are_the_fedpower_keys_without_their_prefix() -> None:
    names = [f.name for f in dataclasses.fields(FedPowerConfig)]
    assert names == [k.removeprefix("fedpower_") for k in topology_keys.FEDPOWER_KEYS]
    assert FedPowerConfig().local_steps == topology_keys.KEYS["fedpower_local_steps"].default


def test_the_key_groups_of_a_file_are_derived_from_the_table() -> None:
    k = topology_keys
    assert k.PRIVACY_KEYS == (
        "epsilon",
        "delta",
        "clip_norm",
        "chunk_size",
        "noise_seed",
        "mechanism",
        "release_horizon",
    )
    assert set(k.DEFAULTABLE_KEYS) == {"rank", *k.BUILTIN_DEFAULTS}
    assert set(k.DEFAULTABLE_KEYS) < set(k.NODE_KEYS)
    assert not {"id", "parent", "sensor_topic", "noise_seed", "source", "open", "admit"} & set(
        k.DEFAULTABLE_KEYS
    )
    assert {"nodes", "defaults", "data", *k.FEDPOWER_KEYS} <= set(k.TOP_LEVEL_KEYS)


def test_a_node_is_validated_then_built_with_normalised_values() -> None:
    node = NodeConfig("a", "root", 2, forget=1, rank_bounds=[0.02, 0.2], epsilon=1, delta=0.1,
                      clip_norm=3)  # fmt: skip
    assert isinstance(node.forget, float) and node.rank_bounds == (0.02, 0.2)
    assert (node.mechanism, node.release_horizon, node.block_size) == ("gaussian", 64, None)
    assert dataclasses.replace(node, forget=0.5, release_horizon=None).release_horizon == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.rank = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        NodeConfig("a", None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        NodeConfig("a", None, 1, colour="red")  # type: ignore[call-arg]


def test_no_module_of_the_topology_changes_a_frozen_instance() -> None:
    import edge_runtime.topology as package

    folder = Path(inspect.getfile(package)).parent
    offenders = [p.name for p in folder.glob("*.py") if "object.__setattr__" in p.read_text()]
    assert offenders == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("stale_weight = 1.5", "node 'leaf': stale_weight must be in (0, 1), got 1.5"),
        ("stale_policy = 'lost'", "stale_policy must be one of 'keep', 'drop', 'downweight'"),
        ("holdoff = 0", "node 'leaf': holdoff must be >= 1 blocks, got 0"),
        ("oversample = -1", "node 'leaf': oversample must be >= 0, got -1"),
        ("stale_weigth = 0.2", "unknown key 'stale_weigth'"),
        ("stale_weigth = 0.2", "did you mean 'stale_weight'?"),
    ],
)
def test_declared_bounds_give_one_line_errors(line: str, message: str) -> None:
    nodes = '[[nodes]]\nid = "root"\n[[nodes]]\nid = "leaf"\nparent = "root"\n'
    text = f"[defaults]\nrank = 2\n{nodes}{line}\n"
    with pytest.raises(TopologyError) as info:
        parse_topology(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_key_renders_its_requirement_type_and_row() -> None:
    key = Key("gap_s", "float", 1.5, "the gap", bound=Bound(0, low_open=True), unit="seconds")
    assert key.must_be == "a finite number > 0 seconds"
    assert key.type_text == "number > 0 (seconds)"
    assert key.check("x", 2) == 2.0
    expected = r"^x: gap_s must be a finite number > 0 seconds, got inf$"
    with pytest.raises(ValueError, match=expected):
        key.check("x", float("inf"))
    with pytest.raises(ValueError, match=r"^x: gap_s must be a number, got boolean true$"):
        key.check("x", True)
    row = markdown_table([key]).splitlines()[2]
    assert row == "| `gap_s` | number > 0 (seconds) | `1.5` | all | the gap |"
