"""Simulated GPU hosts: the ``nvidia-smi`` stand-in and local / sshd cluster launchers.

Kept free of imports: the stand-in loads this package on every call.
"""
