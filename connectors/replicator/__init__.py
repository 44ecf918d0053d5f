"""The replicator family: heartbeats (link liveness and latency) on top of the origin chain that
``connect.tasks.origin`` applies to every replication flow."""
