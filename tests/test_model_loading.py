"""The federation's model loads from a real broker as a fitted FPCAEdge (`edge_runtime.model`)."""

from __future__ import annotations

import asyncio

import aiomqtt
import numpy as np
import pytest
from helpers import collect_retained, low_rank_data, tree_topology

from edge_runtime.broker import BrokerError
from edge_runtime.fpca import FPCAEdge, Subspace
from edge_runtime.model import load_model
from edge_runtime.runner import run_topology
from edge_runtime.settings import AgentSettings
from edge_runtime.wire import SubspaceMessage, decode_subspace, encode_subspace

pytestmark = pytest.mark.mqtt


async def test_a_running_trees_model_transforms_data_exactly_as_the_roots_basis(mosquitto):
    topology = tree_topology(sites=2, leaves_per_site=2, rank=4, block_size=16)
    data = low_rank_data(800, 20, 4, seed=5)
    # float64 on the wire: the model's basis is then the published one, bit for bit
    settings = AgentSettings(
        host=mosquitto.host, port=mosquitto.port, timeout_s=5.0, wire_dtype="float64"
    )
    summary = await run_topology(topology, data, settings, settle_timeout_s=20)
    assert summary.covered

    model = await asyncio.to_thread(load_model, mosquitto.url, topology)  # the two-line API

    root = decode_subspace(
        await collect_retained(mosquitto.host, mosquitto.port, topology.model_topic())
    )
    assert isinstance(model, FPCAEdge) and root.subspace.mean is None  # the paper's uncentred model
    np.testing.assert_array_equal(model.transform(data), data @ root.subspace.basis)
    np.testing.assert_array_equal(model.components_, root.subspace.basis.T)
    np.testing.assert_array_equal(model.singular_values_, root.subspace.singular_values)
    assert model.n_samples_seen_ == root.subspace.n_samples == 800
    assert model.n_features_in_ == 20 and model.rank_ == 4


async def test_a_centred_root_snapshot_loads_and_transforms_about_its_mean(mosquitto):
    topology = tree_topology(rank=3)
    x = low_rank_data(300, 6, 3, seed=2) + 7.0
    summary = FPCAEdge(6, 3, center=True, oversample=3).fit(x).subspace
    message = SubspaceMessage(
        node_id="root", epoch="e0", seq=1, subspace=summary, timestamp=1.0, provenance={}
    )
    async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
        payload = encode_subspace(message, dtype="float64")
        await client.publish(topology.model_topic(), payload, qos=1, retain=True)

    model = await asyncio.to_thread(load_model, mosquitto.url, topology, timeout_s=5.0)

    published = decode_subspace(payload).subspace
    assert published.mean is not None and model.center
    np.testing.assert_array_equal(model.transform(x), (x - published.mean) @ published.basis)
    np.testing.assert_allclose(model.inverse_transform(model.transform(x)), x, atol=0.5)


async def test_no_retained_model_is_a_broker_error_naming_the_topic_after_the_timeout(mosquitto):
    topology = tree_topology()
    with pytest.raises(BrokerError, match=r"no model on '.*/root/model' .* within 0\.5 s"):
        await asyncio.to_thread(load_model, mosquitto.url, topology, timeout_s=0.5)


async def test_an_empty_model_is_a_value_error(mosquitto):
    topology = tree_topology()
    empty = SubspaceMessage(
        node_id="root", epoch="e0", seq=0, subspace=Subspace.empty(5), timestamp=0.0, provenance={}
    )
    async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
        await client.publish(topology.model_topic(), encode_subspace(empty), qos=1, retain=True)
    with pytest.raises(ValueError, match="is empty"):
        await asyncio.to_thread(load_model, mosquitto.url, topology, timeout_s=5.0)


async def test_a_float32_model_is_reorthonormalised_and_transforms_as_its_basis_to_rounding(
    mosquitto,
):
    topology = tree_topology(rank=3)
    x = low_rank_data(300, 12, 3, seed=4)
    summary = FPCAEdge(12, 3, oversample=3).fit(x).subspace
    message = SubspaceMessage(
        node_id="root", epoch="e0", seq=1, subspace=summary, timestamp=1.0, provenance={}
    )
    payload = encode_subspace(message, dtype="float32")  # the agents' default wire dtype
    async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
        await client.publish(topology.model_topic(), payload, qos=1, retain=True)

    model = await asyncio.to_thread(load_model, mosquitto.url, topology, timeout_s=5.0)

    published = decode_subspace(payload).subspace
    exact = published.reorthonormalised().basis
    np.testing.assert_array_equal(model.transform(x), x @ exact)
    np.testing.assert_allclose(model.transform(x), x @ published.basis, rtol=1e-6, atol=1e-5)


async def test_load_model_works_inside_a_running_event_loop_as_in_a_notebook(mosquitto):
    topology = tree_topology(rank=2)
    summary = FPCAEdge(4, 2, oversample=2).fit(low_rank_data(50, 4, 2, seed=1)).subspace
    message = SubspaceMessage(
        node_id="root", epoch="e0", seq=1, subspace=summary, timestamp=1.0, provenance={}
    )
    async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
        payload = encode_subspace(message, dtype="float64")
        await client.publish(topology.model_topic(), payload, qos=1, retain=True)

    model = load_model(mosquitto.url, topology, timeout_s=5.0)  # called on the loop's thread

    assert model.n_samples_seen_ == 50 and model.components_.shape == (2, 4)


@pytest.fixture
def mosquitto(shared_mosquitto):
    """This worker's broker (conftest): the tests here are isolated by their topic prefix."""
    return shared_mosquitto
