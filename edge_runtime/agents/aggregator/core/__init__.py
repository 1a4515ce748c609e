"""The aggregator's synchronous core (see `edge_runtime.agents.aggregator`)."""
