"""ParallelKernelBench's `utils.parallelkittens_runtime` (ThunderKittens parallel tensors and
barriers, set up over CUDA IPC and NVLink multicast) is PKB's code, built against ThunderKittens'
headers; pytest-kernelbench neither copies it nor writes a stand-in. A ParallelKittens candidate
that gets past the multicast scan (docs/pkb.md) stops here, saying why."""
raise ImportError("utils.parallelkittens_runtime is ParallelKernelBench's ThunderKittens runtime, which "
                  "pytest-kernelbench does not provide: ParallelKittens candidates cannot run under this harness")
