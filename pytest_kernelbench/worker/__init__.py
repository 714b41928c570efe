"""Code that runs inside each rank (never in the pytest process)."""
