#!/usr/bin/env bash
# Issue 44, class 5 on one GPU: the candidate process's multicast switches sealed (rank/sealenv.py)
# beside CUDA, NCCL at W = 1 and the shipped symm_mem kernels: the items pass, their records carry
# `sealed-env`, the candidate logs say nothing of a seal refused; and a CUDA process seals and is
# seen sealed from outside (mseal on the GPU machines' kernel).
source "$(dirname "$0")/gpu_common.sh"
machine; uname -r
w1_copy /tmp/kb-w1 collective/all_reduce
log shipped; $PT /tmp/kb-w1 --kb-candidate=shipped --kb-keep-jobs --kb-report=/tmp/kb-seal/w1.json 2>&1 | tail -3
grep -o '"isolation": \[[^]]*\]' /tmp/kb-seal/w1.jsonl | sort | uniq -c
grep -h -i "seal" /tmp/kb-seal/jobs/*/logs/*.log | head -5
log seal-in-a-cuda-process; python3 - <<'PY'
import os, time
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    import torch
    torch.zeros(1, device="cuda")
    from pytest_kernelbench.rank.sealenv import Seal
    s = Seal()
    os.write(w, s.seal().encode())
    time.sleep(20)
    os._exit(0)
print(os.read(r, 1000).decode())
time.sleep(0.5)
from pytest_kernelbench.rank.sealenv import sealed_strings
print("sealed, seen from outside:", sealed_strings(pid))
os.kill(pid, 9)
PY
log done
