"""Published path of the team-mode service (`python -m jupyter_gpuhive.hub`); see server/hub.py."""

from .server.hub import GpuHiveService, main

__all__ = ["GpuHiveService", "main"]

if __name__ == "__main__":
    main()
