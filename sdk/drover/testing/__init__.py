"""Test doubles that speak real protocols (a fake Anthropic Messages API server)."""
