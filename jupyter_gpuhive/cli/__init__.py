"""`jupyter gpuhive …`: set up and run a site from the shell (init, hosts, keys, sim, migrate)."""
