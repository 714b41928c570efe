"""Developer tools for the GPU runs and the shipped sources (not part of the installed package)."""
