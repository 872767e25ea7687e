"""A run's supervisor process (one per run, outliving agentd restarts): the command supervisor, the
sandbox and its launcher, the output recorder, session input, the model gateway and forwarder."""
