"""The aggregator: children's snapshots in, their merge out (the root's is the model).

- `aggregator.core` (synchronous, no I/O): `AggregatorCore` (`core.aggregator`: one record
  per child, the merge tree, when to publish) and `plausibility` (checks of a child's
  snapshot, quarantine, influence caps).
- `aggregator.shell` (async): `AggregatorAgent` (`shell.agent`).
"""
