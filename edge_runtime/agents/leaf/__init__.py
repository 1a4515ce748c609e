"""The leaf: sensor readings in, FPCA-Edge, snapshots, confirmations and scores out.

- `leaf.core` (synchronous, no I/O): `LeafCore` (`core.leaf`) joins `intake` (sequencing
  and range screening of readings), `sequencing` (`SourceSequencer`), `estimator` (the
  FPCA-Edge estimator and its privacy), `resume` (continuing from a checkpoint or a
  retained snapshot), `durability` (when to checkpoint, what to confirm) and `scoring`
  (`ScoringCore`: anomaly scores against the root's model).
- `leaf.shell` (async): `LeafAgent` (`shell.agent`) with `source` (a local sensor source),
  `state_files` (reading and writing the checkpoint, reading the retained snapshot, the
  noise generator of a restart), `scores` (publishing score documents) and `rejections`
  (counting and logging rejected readings).
"""
