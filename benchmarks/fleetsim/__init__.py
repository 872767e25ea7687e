"""Helpers of benchmarks/fleet.py: simulated agents and the Celery baseline."""
