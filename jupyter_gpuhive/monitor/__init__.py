"""Monitoring: the sampler (sweeps → metrics, usage, live state)."""
