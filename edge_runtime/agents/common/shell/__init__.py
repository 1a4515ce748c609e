"""The async parts every agent shares: `agent` (`Agent`: the MQTT connection, reconnects,
the work loop that sleeps until its core's next deadline, status and Last Will),
`core_shell` (`run_numerics`: the one lock around a core, numerics in a worker thread;
`status_document`), `echo` (`SnapshotEcho`: a snapshot published and expected back),
`retained` (`read_retained`), `discovery` (Home Assistant MQTT discovery) and
`secagg_payload` (a secure-aggregation message read or rejected, for both secagg shells)."""
