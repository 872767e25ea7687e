"""agentd: the Drover fleet daemon. It dials out to the control plane and runs Tasks."""

__version__ = "0.1.0"
