"""The federation's global model as a fitted estimator, read from the broker.

The root publishes its merged subspace, truncated to its rank, retained on
``<prefix>/<root>/model`` (`edge_runtime.topology.Topology.model_topic`). `load_model`
subscribes, takes the retained message, decodes it (`edge_runtime.wire.decode_subspace`,
with all its checks) and returns an `edge_runtime.fpca.FPCAEdge` fitted to it, so a
notebook uses the federation's model as a scikit-learn transformer::

    from edge_runtime.model import load_model
    model = load_model("mqtt://127.0.0.1:1883", "topology.toml")
    scores = model.transform(X)  # (X - mean) @ basis, as the root's snapshot defines it

One connection, one message: no reconnects (the call either returns or raises). In a
notebook, whose event loop is already running, `load_model` reads in a worker thread (it
still blocks the caller); ``await read_model(...)`` is the non-blocking form.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from concurrent.futures import ThreadPoolExecutor

import aiomqtt
import numpy as np

from edge_runtime.broker.url import BrokerError, parse_broker_url
from edge_runtime.fpca import FPCAEdge
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import SubspaceMessage, decode_subspace

__all__ = [
    "DEFAULT_MODEL_TIMEOUT_S",
    "FLOAT64_ORTHONORMAL_TOL",
    "load_model",
    "model_estimator",
    "read_model",
]

#: Largest ``|B^T B - I|`` entry `FPCAEdge.from_subspace` accepts (a float64 basis).
FLOAT64_ORTHONORMAL_TOL = 1e-8

#: Seconds `load_model` waits for the broker and the retained model, by default.
DEFAULT_MODEL_TIMEOUT_S = 10.0


def load_model(
    broker_url: str,
    topology: Topology | str | os.PathLike[str],
    *,
    timeout_s: float = DEFAULT_MODEL_TIMEOUT_S,
    settings: AgentSettings | None = None,
) -> FPCAEdge:
    """The root's retained model on ``broker_url`` as a fitted `FPCAEdge` (blocking).

    Parameters
    ----------
    broker_url : str
        ``mqtt://HOST[:PORT]`` or ``mqtts://HOST[:PORT]`` (TLS with the system's CA
        certificates unless ``settings`` gives a CA file).
    topology : Topology, str or path
        The deployment's topology, or its TOML file: gives the model topic.
    timeout_s : float, default=10.0
        Seconds to connect and receive the retained model.
    settings : AgentSettings or None, default=None
        Credentials and TLS files (its host and port are replaced by the URL's); None:
        no TLS files, credentials from the environment (``EDGE_MQTT_USERNAME``, ...).

    Returns
    -------
    FPCAEdge
        Fitted (`model_estimator`): ``transform(X) = (X - mean) @ basis`` with the
        model's basis ``(n_features, rank)`` and mean (zero unless the tree centres).

    Raises
    ------
    BrokerError
        A bad URL, a broker that cannot be reached, or no retained model within
        ``timeout_s`` (the message names the topic).
    WireError
        If the retained payload is not a valid subspace message.
    ValueError
        If the model is empty (rank 0: the root has not merged any sample yet).
    TopologyError
        If ``topology`` is a file that cannot be read as a topology.
    """
    if not isinstance(topology, Topology):
        topology = load_topology(topology)
    reading = read_model(broker_url, topology, timeout_s, settings)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop in this thread: a script
        return model_estimator(asyncio.run(reading))
    # A running loop (a Jupyter notebook): asyncio.run refuses to nest, so read in a thread.
    with ThreadPoolExecutor(1, thread_name_prefix="load_model") as pool:
        return model_estimator(pool.submit(asyncio.run, reading).result())


async def read_model(
    broker_url: str,
    topology: Topology,
    timeout_s: float = DEFAULT_MODEL_TIMEOUT_S,
    settings: AgentSettings | None = None,
) -> SubspaceMessage:
    """The decoded retained message on ``topology.model_topic()`` (see `load_model`)."""
    address = parse_broker_url(broker_url)
    base = AgentSettings().with_credentials_from_env() if settings is None else settings
    kwargs = {**base.client_kwargs(), "hostname": address.host, "port": address.port}
    if address.tls and kwargs["tls_context"] is None:
        kwargs["tls_context"] = ssl.create_default_context()
    kwargs["timeout"] = timeout_s
    topic = topology.model_topic()
    try:
        async with asyncio.timeout(timeout_s):
            async with aiomqtt.Client(**kwargs) as client:
                await client.subscribe(topic, qos=1)
                async for message in client.messages:
                    if isinstance(message.payload, bytes) and message.payload:
                        return decode_subspace(message.payload, max_bytes=base.max_payload_bytes)
    except TimeoutError:
        raise BrokerError(
            f"no model on {topic!r} at {address.url} within {timeout_s:g} s "
            "(is the tree running, and has its root published?)"
        ) from None
    except aiomqtt.MqttError as exc:
        raise BrokerError(f"cannot read {topic!r} from {address.url}: {exc}") from None
    raise BrokerError(f"the connection to {address.url} closed before a model arrived")


def model_estimator(message: SubspaceMessage) -> FPCAEdge:
    """A fitted `FPCAEdge` of a model message: its subspace at its own rank, nothing more.

    ``rank`` is the model's rank, no oversampling, ``center`` exactly when the model has a
    mean; ``n_samples_seen_`` is the samples the federation summarised. The estimator can
    `transform`, `inverse_transform` and report ``components_`` etc.; `partial_fit` would
    continue it with local samples (a new, local stream). The basis is the published one,
    bit for bit, when it is orthonormal to 1e-8 (a float64 wire); a float32 one is first
    re-orthonormalised in float64 (`Subspace.reorthonormalised`, a change of the order of
    float32 rounding), as a leaf does restoring from its own snapshot.

    Raises
    ------
    ValueError
        If the model has rank 0 (nothing merged yet).
    """
    subspace = message.subspace
    if subspace.rank == 0:
        raise ValueError(f"the model of {message.node_id!r} is empty (rank 0, no samples yet)")
    error = np.abs(subspace.basis.T @ subspace.basis - np.eye(subspace.rank)).max()
    if not error <= FLOAT64_ORTHONORMAL_TOL:
        subspace = subspace.reorthonormalised()
    return FPCAEdge.from_subspace(
        subspace, rank=subspace.rank, oversample=0, center=subspace.mean is not None
    )
