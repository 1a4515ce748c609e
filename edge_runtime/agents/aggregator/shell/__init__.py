"""The aggregator's async shell (see `edge_runtime.agents.aggregator`)."""
