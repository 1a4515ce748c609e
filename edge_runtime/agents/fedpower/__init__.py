"""FedPower on the runtime: `fedpower.core` (synchronous: the leaf's Gram estimator, its
round logic, the root's server) and `fedpower.shell` (the leaf, aggregator and root agents).
"""
