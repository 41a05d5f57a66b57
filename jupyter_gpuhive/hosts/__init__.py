"""Hosts: connections (SSH or local), the per-host probe, and nvidia-smi parsing (`nvsmi`)."""
