"""`AgentSettings` declared once (`AGENT_SETTINGS_KEYS`) and the flags that mirror settings.

The connection settings take their fields, defaults, checks and docstring from their table,
and the command line's flags that mirror a setting (``--username``, ``--ca-file``,
``--cert-file``, ``--key-file``, ``agent --prefix``) are built from the same declarations.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edge_runtime.cli.parser import build_parser
from edge_runtime.settings import AGENT_SETTINGS_KEYS, AgentSettings
from edge_runtime.topology.keys import KEYS


def test_agent_settings_fields_and_defaults_are_the_declared_ones() -> None:
    fields = dataclasses.fields(AgentSettings)
    assert [f.name for f in fields] == [k.name for k in AGENT_SETTINGS_KEYS]
    assert all(f.default == k.default for f, k in zip(fields, AGENT_SETTINGS_KEYS, strict=True))
    assert AgentSettings.timeout_s == 10.0
    assert "echo_timeout_s : number >= 0 (seconds), default 30.0" in (AgentSettings.__doc__ or "")


def test_agent_settings_are_checked_in_one_line_and_normalised() -> None:
    settings = AgentSettings(timeout_s=5, ca_file="ca.pem")
    assert settings.timeout_s == 5.0 and isinstance(settings.timeout_s, float)
    assert settings.ca_file == Path("ca.pem")
    assert dataclasses.replace(settings, qos=0).qos == 0
    for kwargs, message in [
        ({"qos": 3}, "AgentSettings: qos must be in [0, 2], got 3"),
        ({"timeout_s": 0}, "AgentSettings: timeout_s must be a finite number > 0 seconds, got 0"),
        ({"wire_dtype": "float16"}, "wire_dtype must be one of 'float32', 'float64'"),
        ({"port": "1883"}, "AgentSettings: port must be an integer, got string '1883'"),
        ({"persistent_session": 1}, "persistent_session must be a boolean, got integer 1"),
    ]:
        with pytest.raises(ValueError) as info:
            AgentSettings(**kwargs)
        assert message in str(info.value) and "\n" not in str(info.value)


def test_the_flags_that_mirror_settings_come_from_their_declarations() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["agent", "--node", "pi-01", "--ca-file", "ca.pem", "--username", "u", "--prefix", "lab"]
    )
    assert (args.ca_file, args.username, args.prefix) == (Path("ca.pem"), "u", "lab")
    defaults = parser.parse_args(["agent", "--node", "pi-01"])
    assert defaults.prefix == KEYS["prefix"].default
    assert (defaults.ca_file, defaults.cert_file, defaults.key_file) == (None, None, None)
    flags = {k.flag for k in AGENT_SETTINGS_KEYS if k.flag}
    assert flags == {"--username", "--ca-file", "--cert-file", "--key-file"}


def test_a_flag_value_is_checked_against_its_declaration() -> None:
    from edge_runtime.cli.argtypes import declared_value

    port = declared_value(next(k for k in AGENT_SETTINGS_KEYS if k.name == "port"))
    assert port("1884") == 1884
    with pytest.raises(Exception, match=r"expected in \[0, 65535\], got '70000'"):
        port("70000")
    with pytest.raises(Exception, match="expected an integer, got 'x'"):
        port("x")
