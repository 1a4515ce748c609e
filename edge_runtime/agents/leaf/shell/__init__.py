"""The leaf's async shell (see `edge_runtime.agents.leaf`); `LeafAgent` is in `agent`."""
