"""FedPower on the runtime, the synchronous part: a leaf core and the root's server core.

No I/O, no clock (time comes in as an argument), as every core of `edge_runtime.agents`.
Internal to the runtime, so ``__all__`` is empty: import each piece from its module.

- `GramEstimator` (`edge_runtime.agents.fedpower.core.estimator`) keeps a leaf's `LocalGram`
  behind the estimator interface `LeafCore` drives, so a FedPower leaf shares the FPCA
  leaf's whole data path (sensor topic, replay, local sources, sequencing, confirmations,
  checkpoints, retained-snapshot restore).
- `FedPowerLeafCore` (`edge_runtime.agents.fedpower.core.leaf`) is a `LeafCore` with that
  estimator, plus the round logic: on a round message it runs the round's local iterations
  (`local_iterations`) on ``A_l = S/n`` from the round's basis and replies with ``Y`` and
  its sample count (a leaf without readings does not reply; a leaf replies at most once per
  round per process).
- Differential privacy (a leaf with ``epsilon``, ``delta``, ``clip_norm``; mechanism
  `edge_runtime.fedpower.accounting.MECHANISM`): readings are clipped into the unit ball
  (``LocalGram(clip_norm=C)``), every local iteration adds Gaussian noise calibrated by
  `fedpower_noise_std` for the ``T`` local iterations of the bounded schedule
  (`FedPowerConfig.total_iterations`), the leaf stops replying once it has run ``T``, its
  replies carry the guarantee and it never publishes its Gram (no restore snapshot: a
  private leaf restarts from its checkpoint, or empty).
- `FedPowerRootCore` (`edge_runtime.agents.fedpower.core.root`) wraps `FedPowerServer`
  (Algorithm 3, partial participation: a round closes with ``K`` replies or at its timeout;
  later replies are dropped and counted) and decides when to start rounds, when to close
  them and what model to publish.
"""

__all__: list[str] = []
