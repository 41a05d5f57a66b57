"""Hosts: connections (SSH or local), the per-host probe, and the GPU vendors' tools (`vendors`)."""
