"""A deterministic in-memory simulation of a whole federation of agent cores (no I/O).

`Simulation` (`edge_runtime.simulation.engine`, whose docstring says what is modelled) wires
one core per node of a `Topology` over a simulated broker in virtual time, holding its parts
(`events`: draws, event queue and links; `replay_model`: the model of the replay; `outcome`:
the tallies and the result) and carrying out every core's actions through `executor` (the
simulation's executor, usable alone against any virtual broker); `config` holds its settings
and result, `fleet` builds synthetic trees and readings. Run one with
``python -m edge_runtime.simulation --leaves 10000 --fanout 100 --root-crash``.

Internal to the runtime, so ``__all__`` is empty: import each name from its module.
"""

__all__: list[str] = []
