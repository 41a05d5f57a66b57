"""The Jupyter server extension: configuration, the REST API, team mode, identity, kernels."""
