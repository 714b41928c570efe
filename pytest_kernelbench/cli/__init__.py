"""The `kernelbench` command: leaderboards, plots and pages from reports, the comparison of two
runs, the training-data export, and the post-processors of GPU runs (bench/ keeps the shell
scripts that make those runs). Reads reports only: no torch, no machine probe."""
