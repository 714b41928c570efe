"""What a built native candidate may call: its library's undefined dynamic symbols, checked against
an allowlist derived from the problem's recipe, instead of a denylist of names in the source
(which `fopen64`, or a name built by the preprocessor, walked past).

Allowed: every symbol the problem's own shipped fill needs (the fixed part of the template and an
expert's regions, built with the same recipe), the API of each library the recipe links (NCCL,
NVSHMEM, the CUDA driver, pthreads, POSIX shared memory), and the C and C++ runtime's memory,
string, math, formatting-to-stdout and exception machinery. Not allowed: anything else, among it
opening files, processes, sockets, dynamic loading and the environment.
"""
from __future__ import annotations

import re
import struct
from pathlib import Path

# the API of each library a recipe may link, by name prefix
LIBRARY_PREFIXES = {
    "nccl": ("nccl", "pncclx"), "nccl_device": ("nccl",), "nvshmem": ("nvshmem", "nvshmemx", "nvshmemi"),
    "cuda": ("cu",), "cudart": ("cuda", "__cuda"), "pthread": ("pthread_", "sem_"),
    "rt": ("shm_open", "shm_unlink", "clock_gettime", "clock_nanosleep", "nanosleep", "mmap", "munmap", "ftruncate",
           "close", "sched_yield"),
}
# the C and C++ runtime a kernel's host code may use
RUNTIME = re.compile(r"""^(?:
    mem(?:cpy|set|move|cmp|chr)|str(?:len|nlen|cmp|ncmp|cpy|ncpy|chr|rchr|str|tol|toul|toll|toull|tod|tof|error)|
    (?:v?s?n?printf|puts|putchar|fputs|fputc|fflush|fwrite|fprintf|vfprintf|perror)|
    (?:malloc|calloc|realloc|free|aligned_alloc|posix_memalign|abort|exit|atexit|__cxa_atexit|__cxa_finalize)|
    (?:sqrtf?|expf?|exp2f?|logf?|log2f?|powf?|fabsf?|floorf?|ceilf?|roundf?|fmaxf?|fminf?|tanhf?|sinf?|cosf?|erff?)|
    (?:__errno_location|__stack_chk_fail|__assert_fail|__cxa_\w+|__gxx_personality_v0|_Unwind_\w+|__gmon_start__|
       _ITM_\w+|__dso_handle|stdout|stderr|__printf_chk|__fprintf_chk|__sprintf_chk|__snprintf_chk|__vsnprintf_chk|
       __memcpy_chk|__memset_chk|__memmove_chk|__strcpy_chk|__strncpy_chk|__isoc\d*_\w+|time|clock|sched_yield|
       usleep|nanosleep|getpid|sysconf|__sched_cpucount|pthread_\w+|__libc_single_threaded)|
    _ZNSt6chrono\w+|
    _Zn[wa][mj]\w*|_Zd[la]Pv\w*|_ZSt\d+__throw_\w+|_ZSt9terminatev|_ZTVN10__cxxabiv1\w+|_ZTI\w+|_ZTS\w+|
    _ZNSt\d*(?:exception|bad_alloc|runtime_error|logic_error|length_error|out_of_range|invalid_argument)\w*|
    _ZNKSt\d*(?:exception|bad_alloc|runtime_error|logic_error)\w*|_ZSt\d*(?:cout|cerr|endl)\w*|
    _ZNSo\w*|_ZNSt8ios_base\w*|_ZSt16__ostream_insert\w*|_ZNSt7__cxx1112basic_string\w*|_ZSt19__throw_\w+
)$""", re.X)

SHN_UNDEF = 0


def undefined_symbols(lib: str | Path) -> set[str]:
    """The names a 64-bit little-endian ELF shared library needs from elsewhere (its .dynsym
    entries with no section), read without any tool."""
    data = Path(lib).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{lib}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = set()
    for _name, kind, _f, _a, offset, size, link, _i, _al, entsize in sections:
        if kind != 11:             # SHT_DYNSYM
            continue
        strtab = sections[link]
        str_off = strtab[4]
        for k in range(size // (entsize or 24)):
            st_name, _info, _other, shndx, _value, _sz = struct.unpack_from("<IBBHQQ", data, offset + k * (entsize or 24))
            if shndx == SHN_UNDEF and st_name:
                end = data.index(b"\0", str_off + st_name)
                out.add(data[str_off + st_name:end].decode(errors="replace"))
    return out


def allowed(symbol: str, libraries: tuple, expert: set[str]) -> bool:
    if symbol in expert or RUNTIME.match(symbol.split("@")[0]):
        return True
    return any(symbol.startswith(p) for lib in libraries for p in LIBRARY_PREFIXES.get(lib, ()))


def refused(lib: str | Path, libraries: tuple, expert: set[str]) -> list[str]:
    """The undefined symbols of `lib` that the recipe does not allow, sorted."""
    return sorted(s for s in undefined_symbols(lib) if not allowed(s, libraries, expert))
