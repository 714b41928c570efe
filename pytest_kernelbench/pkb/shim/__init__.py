"""Put on a PKB item's rank import path (pkb/adapter.py): its `utils` package stands in for
ParallelKernelBench's own utils helpers, so published PKB candidates import unchanged."""
