"""ParallelKernelBench under this harness (`--kb-pkb=PATH`): PKB's problems as items `pkb/<N>_<name>`
and its candidates (`--kb-solutions` in PKB's layout), with our deadline, checks, fresh inputs,
forbid enforcement, multicast refusal and timing. We never ship or copy PKB's code: the pytest
process reads the user's checkout as text (checkout.py: problems, fingerprint; pairing.py: which
candidate file is whose; static.py: the candidate stages that need no rank; eligibility.py: where
the census found each reference runs on CPU); the ranks import it (adapter.py); PKB's small
`utils` helpers for candidates are our own (shim/utils)."""
