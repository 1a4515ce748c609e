"""Find or start a Mosquitto broker, or parse the URL of one to connect to.

The runtime needs one MQTT broker. A user either names one (``--broker
mqtt://HOST:PORT``, parsed by `parse_broker_url`) or lets the runtime start a
private Mosquitto on the loopback interface (`LocalMosquitto`), found by
`find_mosquitto`.

Modules (one concept each):

=============  ===========================================================================
`url`          `parse_broker_url`, `BrokerAddress`, `BrokerError`: where to connect
`config`       `derive_config`: the configuration a `LocalMosquitto` runs with, derived
               from the shipped ``broker_config/mosquitto.conf``
`mosquitto`    `LocalMosquitto`, `find_mosquitto`, `free_port`: the private broker process
=============  ===========================================================================

Exceptions::

    RuntimeError
     └── BrokerError      no broker binary, bad URL, broker failed to start or stop

Stdlib only.
"""

from __future__ import annotations

from edge_runtime.broker.config import DERIVED_CONFIG_DROPPED_KEYS, LOCAL_HOST, derive_config
from edge_runtime.broker.mosquitto import (
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_STOP_TIMEOUT_S,
    FREE_PORT_ATTEMPTS,
    MOSQUITTO_FALLBACK_PATHS,
    MOSQUITTO_NOT_FOUND,
    PORT_RETRIES,
    START_POLL_INTERVAL_S,
    LocalMosquitto,
    find_mosquitto,
    free_port,
)
from edge_runtime.broker.url import (
    MQTT_PORT,
    MQTTS_PORT,
    BrokerAddress,
    BrokerError,
    parse_broker_url,
)

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "DERIVED_CONFIG_DROPPED_KEYS",
    "FREE_PORT_ATTEMPTS",
    "LOCAL_HOST",
    "MOSQUITTO_FALLBACK_PATHS",
    "MOSQUITTO_NOT_FOUND",
    "MQTTS_PORT",
    "MQTT_PORT",
    "PORT_RETRIES",
    "START_POLL_INTERVAL_S",
    "BrokerAddress",
    "BrokerError",
    "LocalMosquitto",
    "derive_config",
    "find_mosquitto",
    "free_port",
    "parse_broker_url",
]
