"""Kernels on reservations: the provisioner, its registry, remote launch, specs, lifecycle."""
