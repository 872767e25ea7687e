"""The Drover control plane: services, domain logic, store and scheduler."""
