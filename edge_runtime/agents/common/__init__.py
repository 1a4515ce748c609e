"""What every agent shares: `common.core` (the node core, the publish / status / confirm
policies, the rate-limited log decisions) and `common.shell` (the async `Agent` over MQTT,
the core lock, Home Assistant discovery)."""
