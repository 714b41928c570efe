"""The rank side: one checker process per rank (trusted: the job's secret, the hidden harness, the
reference, the verdict) and one candidate process per rank (hardened: candidate code, nothing
else). Nothing here imports the pytest side; both sides share pytest_kernelbench.protocol."""
