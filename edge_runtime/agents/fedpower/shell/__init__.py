"""FedPower's async shells (see `edge_runtime.agents.fedpower`)."""
