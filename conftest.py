# Repo-level pytest configuration. The kernelbench plugin itself loads through its pytest11
# entry point (pip install -e .), or with `-p pytest_kernelbench.plugin` from a plain checkout.
# Job folders under reports/ hold copies of candidates: never collect them.
collect_ignore_glob = ["reports/*"]
