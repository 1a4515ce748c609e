"""Find or start a Mosquitto broker, or parse the URL of one to connect to.

The runtime needs one MQTT broker. A user either names one (``--broker
mqtt://HOST:PORT``, parsed by `parse_broker_url`) or lets the runtime start a
private Mosquitto on the loopback interface (`LocalMosquitto`), found by
`find_mosquitto`. A broker with Mosquitto's dynamic security plugin
(``broker_config/dynsec.conf``, ``LocalMosquitto(dynsec=True)``) changes its clients and
their ACLs at run time through `DynsecClient`.

Modules (one concept each):

=============  ===========================================================================
`url`          `parse_broker_url`, `BrokerAddress`, `BrokerError`: where to connect
`config`       `derive_config`: the configuration a `LocalMosquitto` runs with, derived
               from the shipped ``broker_config/mosquitto.conf``
`mosquitto`    `LocalMosquitto`, `find_mosquitto`, `free_port`: the private broker process
`dynsec`       `DynsecClient`, `Acl`, `DynsecError`, `find_dynsec_plugin`: the dynamic
               security plugin, where it is installed and its control API
=============  ===========================================================================

Exceptions::

    RuntimeError
     └── BrokerError      no broker binary, bad URL, broker failed to start or stop
          └── DynsecError the dynamic security plugin refused or did not answer a command

Stdlib only, besides aiomqtt in `dynsec`. The names below are imported from their module
on first use (PEP 562): an agent, which only parses a URL, does not load the rest
(a leaf's import time and RSS stay low).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_runtime.lazy import lazy_names

if TYPE_CHECKING:
    from edge_runtime.broker.config import (
        DERIVED_CONFIG_DROPPED_KEYS as DERIVED_CONFIG_DROPPED_KEYS,
    )
    from edge_runtime.broker.config import DYNSEC_DROPPED_KEYS as DYNSEC_DROPPED_KEYS
    from edge_runtime.broker.config import LOCAL_HOST as LOCAL_HOST
    from edge_runtime.broker.config import derive_config as derive_config
    from edge_runtime.broker.config import dynsec_admin_config as dynsec_admin_config
    from edge_runtime.broker.dynsec import CONTROL_TOPIC as CONTROL_TOPIC
    from edge_runtime.broker.dynsec import DEFAULT_DYNSEC_TIMEOUT_S as DEFAULT_DYNSEC_TIMEOUT_S
    from edge_runtime.broker.dynsec import DYNSEC_PLUGIN_NOT_FOUND as DYNSEC_PLUGIN_NOT_FOUND
    from edge_runtime.broker.dynsec import RESPONSE_TOPIC as RESPONSE_TOPIC
    from edge_runtime.broker.dynsec import Acl as Acl
    from edge_runtime.broker.dynsec import DynsecClient as DynsecClient
    from edge_runtime.broker.dynsec import DynsecError as DynsecError
    from edge_runtime.broker.dynsec import find_dynsec_plugin as find_dynsec_plugin
    from edge_runtime.broker.mosquitto import DEFAULT_START_TIMEOUT_S as DEFAULT_START_TIMEOUT_S
    from edge_runtime.broker.mosquitto import DEFAULT_STOP_TIMEOUT_S as DEFAULT_STOP_TIMEOUT_S
    from edge_runtime.broker.mosquitto import DYNSEC_ADMIN_USER as DYNSEC_ADMIN_USER
    from edge_runtime.broker.mosquitto import FREE_PORT_ATTEMPTS as FREE_PORT_ATTEMPTS
    from edge_runtime.broker.mosquitto import MOSQUITTO_FALLBACK_PATHS as MOSQUITTO_FALLBACK_PATHS
    from edge_runtime.broker.mosquitto import MOSQUITTO_NOT_FOUND as MOSQUITTO_NOT_FOUND
    from edge_runtime.broker.mosquitto import PORT_RETRIES as PORT_RETRIES
    from edge_runtime.broker.mosquitto import START_POLL_INTERVAL_S as START_POLL_INTERVAL_S
    from edge_runtime.broker.mosquitto import LocalMosquitto as LocalMosquitto
    from edge_runtime.broker.mosquitto import find_mosquitto as find_mosquitto
    from edge_runtime.broker.mosquitto import free_port as free_port
    from edge_runtime.broker.url import MQTT_PORT as MQTT_PORT
    from edge_runtime.broker.url import MQTTS_PORT as MQTTS_PORT
    from edge_runtime.broker.url import BrokerAddress as BrokerAddress
    from edge_runtime.broker.url import BrokerError as BrokerError
    from edge_runtime.broker.url import parse_broker_url as parse_broker_url

__all__: list[str] = []  # internal to the runtime: no user surface

_MODULE_OF = {
    name: f"edge_runtime.broker.{module}"
    for module, names in {
        "config": (
            "DERIVED_CONFIG_DROPPED_KEYS",
            "DYNSEC_DROPPED_KEYS",
            "LOCAL_HOST",
            "derive_config",
            "dynsec_admin_config",
        ),
        "dynsec": (
            "CONTROL_TOPIC",
            "DEFAULT_DYNSEC_TIMEOUT_S",
            "DYNSEC_PLUGIN_NOT_FOUND",
            "RESPONSE_TOPIC",
            "Acl",
            "DynsecClient",
            "DynsecError",
            "find_dynsec_plugin",
        ),
        "mosquitto": (
            "DEFAULT_START_TIMEOUT_S",
            "DEFAULT_STOP_TIMEOUT_S",
            "DYNSEC_ADMIN_USER",
            "FREE_PORT_ATTEMPTS",
            "MOSQUITTO_FALLBACK_PATHS",
            "MOSQUITTO_NOT_FOUND",
            "PORT_RETRIES",
            "START_POLL_INTERVAL_S",
            "LocalMosquitto",
            "find_mosquitto",
            "free_port",
        ),
        "url": ("MQTT_PORT", "MQTTS_PORT", "BrokerAddress", "BrokerError", "parse_broker_url"),
    }.items()
    for name in names
}
"""The module of each public name (imported on first use by `__getattr__`)."""


__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF, _MODULE_OF)
