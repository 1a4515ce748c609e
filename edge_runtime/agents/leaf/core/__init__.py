"""The leaf's synchronous core (see `edge_runtime.agents.leaf`); `LeafCore` is in `leaf`."""
