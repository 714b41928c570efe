"""Our stand-in for ParallelKernelBench's `utils` package, as its candidates use it:
`utils.cuda_helpers.compile_cuda_extension` and `utils.triton_utils`. Written here from PKB's
documented behaviour; PKB's own files are never copied or imported."""
