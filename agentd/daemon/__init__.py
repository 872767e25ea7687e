"""agentd's long-lived daemon process: the connection to the control plane, the outbox, the run
registry and run slots, the supervisor template (prefork), config, metrics and the start-up checks."""
