"""The CPU's kernel for a summary's blocks of attention rows (attention_rows.c), compiled once per machine.

A summary reads each block of query rows once: the softmax, the entropy, the distances, the shares of three keys,
the thumbnail's and the rollout's column sums. As torch ops that is a dozen passes over a (heads, rows, keys) block
too large for the cache, each paying a dispatch; the kernel makes every number of a row while the row is in the
cache (MiniLM at 512 tokens: about a fifth of the torch ops' time). It is compiled with the machine's C compiler
(`$CC`, else `cc`) on first use into the user cache (model/core/cache_folder.py), with OpenMP where the compiler
has it; where none compiles it, `attention_rows()` is None and the torch ops do the work
(model/core/attention/row_reduction.py). Built with AVX-512 it also makes a block's scores from its queries and
keys and attention's output from its values (`from_queries`), a few rows at a time while they are in the cache,
instead of reading torch's Q K^T and leaving P V to torch.

It is compiled with -ffast-math but without its finite-math assumption (a NaN or infinite score, a half-precision
overflow, gives what the torch ops give: tests/model/test_row_reduction.py), and linked without -ffast-math: gcc before
13 links a fast-math shared library with code that flushes subnormal floats to zero for the whole process when it loads.

OpenMP: the library is built with it where the compiler has it, and loaded so only where the OpenMP runtime it
needs is the one the process has already (torch's: it binds to that one) or none is loaded yet; else a build
without OpenMP is loaded (one thread), never a second OpenMP runtime (two abort the process: "OMP: Error #15").
The processor: a build is cached under the compiler's own view of its target (its predefined macros with the build's
flags: `-march=native`'s instruction sets, the compiler's version), so a cache shared by machines of other
processors, on any OS, holds a build for each. And before anything of a library runs, the instruction set extensions
it was built for are asked of the processor (`built_for`, `processor_has` in the C file); where one is missing, a
build for the compiler's default target (no -march, so any processor of its kind) is loaded instead.

Its guard, `run_kernel`, checks every index the C code takes (ValueError with a sentence: a programming error,
never a read or a write outside an array); a working buffer the C code cannot allocate raises MemoryError.
`python -m attention_atlas.model.core.attention.native` builds it ahead of the first run (`make` does).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path

import numpy as np
import torch

from attention_atlas.model.core.attention.native.guard import check_arguments, check_scores
from attention_atlas.model.core.cache_folder import cache_dir

SOURCE = Path(__file__).with_name("attention_rows.c")
FLAGS = ("-O3", "-march=native", "-fPIC", "-ffast-math", "-fno-finite-math-only",
         "-fopenmp-simd")  # the machine's vector unit; the `omp simd` reductions vectorised in both builds
PORTABLE = tuple(flag for flag in FLAGS if flag != "-march=native")  # the compiler's default target: any processor
OPENMP_RUNTIME = re.compile(rb"lib(?:gomp|omp|iomp5)[\w.-]*?\.(?:so(?:\.\d+)*|dylib)")  # a runtime's file name
DISABLE = "ATTENTION_ATLAS_NO_NATIVE"  # set (to anything) to use the torch ops only
_build_lock = threading.Lock()
_log = logging.getLogger(__name__)
_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
_ARGUMENTS = (_P, _P, _L, _I, _I, _I, _I, _L, _I, _F, _P, _I, _P, _P, _I, _P, _P, _I, _P, _P)
_QUERIES = (_P, _P, _L, _I, _I, _P, _L, _I, _P, _L)  # attention_rows_from_queries: before attention_rows's
_SCORES = (_P, _P, _L, _I, _I, _I, _P, _I)  # query_scores
OUT_OF_MEMORY = 1  # what the C functions return where a working buffer was not granted (0: done)
TILE_ROWS = 12  # rows of a head attention_rows_from_queries makes and reduces at a time (attention_rows.c), a thread's
KERNEL_BLOCK_BYTES = 96 << 20  # its blocks' (heads, rows, keys) float32 scores at most (`even_tiles`)
KERNEL_ROWS = 128  # and rows at most: fewer rows skip more of a causal mask's hidden keys (source.py ROW_BLOCK)


@cache
def attention_rows() -> ctypes._CFuncPtr | None:
    """The compiled kernel's `attention_rows` (attention_rows.c says what it computes), or None where it cannot be
    had (no C compiler, a failed build, or $ATTENTION_ATLAS_NO_NATIVE set)."""
    if os.environ.get(DISABLE):
        return None
    for flags in (FLAGS, PORTABLE):  # the machine's build, or where the processor lacks what it used, one for any
        with _build_lock:
            library = _joins_the_process(_built(openmp=True, flags=flags)) or _built(openmp=False, flags=flags)
        if library is None:
            return None
        try:
            return loaded(library)
        except UnfitProcessor as error:
            _log.warning("The CPU kernel %s is not for this processor; a build for any is used (slower): %s", library,
                         error)
        except (OSError, AttributeError) as error:  # a library this process cannot load (its OpenMP, say)
            _log.warning("The CPU kernel %s did not load; attention summaries use torch ops (slower): %s", library,
                         error)
            return None
    return None


class UnfitProcessor(OSError):
    """A library built for instruction set extensions this processor lacks (its code would stop the process)."""


def loaded(library: Path) -> ctypes._CFuncPtr:
    """The `attention_rows` of a built library, ready to call (`run_kernel`); its `from_queries`: the library's
    `attention_rows_from_queries`, which makes a block's scores itself, or None where it cannot (no AVX-512); its
    `scores`: `query_scores` (`scores_of`), or None so; its `library`: the file. UnfitProcessor, before any of its
    code runs, where the processor lacks what it used."""
    shared = ctypes.CDLL(str(library))
    checked = hasattr(shared, "built_for")  # (an older kernel's has no check, and returns nothing: kernel_ab)
    lacking = [name for name in built_for(shared) if not _processor_has(shared, name)] if checked else []
    if lacking:
        raise UnfitProcessor(f"{library.name} was built for {', '.join(lacking)}, which this processor lacks")
    function, status = shared.attention_rows, ctypes.c_int if checked else None
    function.argtypes, function.restype, function.library = _ARGUMENTS, status, library
    makes_scores = hasattr(shared, "makes_scores") and shared.makes_scores()  # (an older kernel's has none: kernel_ab)
    function.from_queries = shared.attention_rows_from_queries if makes_scores else None
    if function.from_queries is not None:
        function.from_queries.argtypes, function.from_queries.restype = _QUERIES + _ARGUMENTS, status
    function.scores = shared.query_scores if makes_scores and hasattr(shared, "query_scores") else None
    if function.scores is not None:
        function.scores.argtypes, function.scores.restype = _SCORES, status
    return function


def built_for(shared: ctypes.CDLL) -> list[str]:
    """The instruction set extensions a library's compiler used that a processor of its kind may lack (x86: sse3 to
    avx512cd; aarch64: sve, sve2), as `__builtin_cpu_supports` names them."""
    shared.built_for.restype = ctypes.c_char_p
    return shared.built_for().decode().split()


def _processor_has(shared: ctypes.CDLL, name: str) -> bool:
    """Whether this processor (and its OS) runs the extension `name` (x86: cpuid; aarch64 Linux: the hwcaps)."""
    return bool(shared.processor_has(name.encode()))


def _built(openmp: bool, source: Path = SOURCE, flags: tuple[str, ...] = FLAGS) -> Path | None:
    """The library for `source` (the kernel's), the compiler and processor, with OpenMP or without, built into the
    user cache unless it is there (None: no compiler, or the build failed; Apple's clang has no OpenMP). `source` and
    `flags`: another version of the kernel, or other flags, side by side with this one (bench/kernel_ab.py, tests)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        _log.warning("No C compiler found: attention summaries use torch ops on the CPU (slower).")
        return None
    built_with = [*flags, *(["-fopenmp"] if openmp else [])]  # a list: its repr is part of the cached name
    name = library_name(source, compiler, built_with)
    if name is None:
        if not openmp:
            _log.warning("The C compiler %s does not run; attention summaries use torch ops (slower).", compiler)
        return None
    target = cache_dir() / "native" / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built, obj = Path(scratch) / target.name, Path(scratch) / "attention_rows.o"
        compile_and_link = ([compiler, *built_with, "-c", str(source), "-o", str(obj)],
                            [compiler, "-shared", *built_with[-1:] * openmp, str(obj), "-o", str(built), "-lm"])
        try:
            for command in compile_and_link:
                subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as error:
            if not openmp:
                _log.warning("The CPU kernel did not compile; attention summaries use torch ops (slower): %s",
                             getattr(error, "stderr", None) or error)
            return None
        os.replace(built, target)  # atomic: another process building it at the same time finds one whole
    return target


def _joins_the_process(library: Path | None) -> Path | None:
    """`library` where loading it brings no second OpenMP runtime into this process: it needs none, or only those
    loaded already (it binds to them), or none is loaded yet. None otherwise, or where the loaded libraries cannot
    be listed."""
    if library is None:
        return None
    needed = {name.decode() for name in OPENMP_RUNTIME.findall(library.read_bytes())}
    loaded = loaded_openmp_runtimes()
    if not needed or (loaded is not None and (not loaded or needed <= loaded)):
        return library
    _log.info("The CPU kernel's OpenMP (%s) is not this process's (%s): it runs on one thread.", needed, loaded)
    return None


def loaded_openmp_runtimes() -> set[str] | None:
    """The file names of the OpenMP runtimes loaded in this process (Linux: from /proc/self/maps; macOS: from dyld),
    or None where they cannot be listed."""
    if Path("/proc/self/maps").exists():
        names = {line.rsplit("/", 1)[-1].strip() for line in Path("/proc/self/maps").read_text().splitlines()}
    elif platform.system() == "Darwin":
        dyld = ctypes.CDLL(None)
        dyld._dyld_get_image_name.restype = ctypes.c_char_p
        names = {dyld._dyld_get_image_name(i).decode().rsplit("/", 1)[-1] for i in range(dyld._dyld_image_count())}
    else:
        return None
    return {name for name in names if OPENMP_RUNTIME.fullmatch(name.encode())}


def library_name(source: Path, compiler: str, flags: list[str]) -> str | None:
    """The cached library's file name: a hash of the source, the flags, the compiler and its target's predefined
    macros (another processor, another `-march=native`: other macros, another build), or None where the compiler
    does not run."""
    macros = target_macros(compiler, tuple(flags))
    if macros is None:
        return None
    key = hashlib.sha256(source.read_bytes() + repr((flags, compiler)).encode() + macros)
    return f"attention_rows-{key.hexdigest()[:16]}.so"


def target_macros(compiler: str, flags: tuple[str, ...]) -> bytes | None:
    """The macros `compiler` predefines for `flags` (`-E -dM`, gcc's and clang's), sorted: its version and the
    instruction sets it builds for (`-march=native`: __AVX512F__, __ARM_FEATURE_SVE, ...); None where it fails."""
    try:
        run = subprocess.run([compiler, *flags, "-E", "-dM", "-x", "c", os.devnull], check=True, capture_output=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return b"\n".join(sorted(run.stdout.splitlines()))


def _pointer(array: torch.Tensor | np.ndarray) -> int:
    return array.data_ptr() if isinstance(array, torch.Tensor) else array.ctypes.data


def run_kernel(kernel: ctypes._CFuncPtr, scores: torch.Tensor, allowed: torch.Tensor | np.ndarray, first: int,
               query0: int, positional: bool, floor_bits: float, thumb_starts: np.ndarray, thumb: torch.Tensor,
               roll_starts: np.ndarray | None, roll: torch.Tensor | None, stats: torch.Tensor,
               queries: tuple[torch.Tensor, torch.Tensor] | None = None,
               values: tuple[torch.Tensor, torch.Tensor] | None = None, sinks: torch.Tensor | None = None,
               normalisers: torch.Tensor | None = None) -> None:
    """Call the kernel on one block: scores (heads, rows, width), the probabilities once it returns, allowed
    (rows, >= width) bool, thumb (heads, rows, len(thumb_starts) - 1), roll (rows, len(roll_starts) - 1) or None,
    stats (heads, rows, 5); every tensor float32, contiguous, on the CPU; starts int32, ending at width or after;
    floor_bits in [-126, 0] (2^x of those is a normal float). With `queries`, (query (heads, rows, d) in bits,
    contiguous; keys (kv_heads, d, >= width), each of the d rows contiguous), the kernel's `from_queries` makes the
    scores itself (query . keys of its group's key head) before it reduces them: `scores` is where they go; with
    `values` as well, (value (kv_heads, >= width, dv) contiguous, output (heads, rows, dv), its rows contiguous), it
    writes attention's output, the probabilities times the values of their group's value head, into `output`.
    `sinks` (heads,) float32, contiguous, in bits: each head's sink logit, one more key of its rows (GPT-OSS).
    `normalisers` (heads, rows) float32, contiguous: where given, each row's log2 normaliser in bits is written there
    (p = 2^(score - it) for the keys seen; NaN where a row sees none)."""
    if isinstance(allowed, np.ndarray | torch.Tensor):  # the kernel reads a row's keys one after another
        allowed = np.ascontiguousarray(allowed) if isinstance(allowed, np.ndarray) else allowed.contiguous()
    check_arguments(scores, allowed, first, query0, floor_bits, thumb_starts, thumb, roll_starts, roll, stats,
                    getattr(kernel, "from_queries", None) is not None, queries, values, sinks, normalisers)
    heads, rows, width = scores.shape
    row_stride = allowed.strides[0] if isinstance(allowed, np.ndarray) else allowed.stride(0)
    arguments = (scores.data_ptr(), _pointer(allowed), row_stride, heads, rows, width, int(first), int(query0),
                 int(positional), floor_bits, thumb_starts.ctypes.data, len(thumb_starts) - 1, thumb.data_ptr(),
                 None if roll_starts is None else roll_starts.ctypes.data,
                 0 if roll_starts is None else len(roll_starts) - 1, None if roll is None else roll.data_ptr(),
                 stats.data_ptr(), torch.get_num_threads(), None if sinks is None else sinks.data_ptr(),
                 None if normalisers is None else normalisers.data_ptr())
    if queries is None:
        status = kernel(*arguments)
    else:
        query, keys = queries
        value, output = values if values is not None else (None, None)
        status = kernel.from_queries(
            query.data_ptr(), keys.data_ptr(), keys.stride(1), query.shape[-1], heads // len(keys),
            None if value is None else value.data_ptr(), 0 if value is None else value.stride(0),
            0 if value is None else value.shape[2], None if output is None else output.data_ptr(),
            0 if output is None else output.stride(0), *arguments)
    if status == OUT_OF_MEMORY:  # (an older kernel's None: kernel_ab; 2, no AVX-512, the guard rules out)
        raise MemoryError(f"The CPU kernel could not allocate its working memory for {heads} heads x {rows} rows x "
                          f"{width} keys.")


def scores_of(kernel: ctypes._CFuncPtr, query: torch.Tensor, keys: torch.Tensor, width: int) -> torch.Tensor:
    """(rows, width) float32: query (rows, d) . keys (d, >= width) for the first `width` keys, by the kernel's
    product tile (`kernel.scores`, which must not be None): query float32 contiguous, keys float32 with each of its d
    rows contiguous, both on the CPU (guard.check_scores)."""
    check_scores(query, keys, width)
    out = torch.empty(len(query), width)
    status = kernel.scores(query.data_ptr(), keys.data_ptr(), keys.stride(0), query.shape[1], len(query), width,
                           out.data_ptr(), torch.get_num_threads())
    if status == OUT_OF_MEMORY:
        raise MemoryError(f"The CPU kernel could not allocate its working memory for {len(query)} rows of scores.")
    return out


def even_tiles(rows: int, row_bytes: int, block_bytes: int) -> int:
    """A block's query rows for `attention_rows_from_queries`, where source.py `block_rows` chose `rows` by its bytes
    (`block_bytes`, at `row_bytes` a row; a block capped by its count of rows is left as it is): as many as
    KERNEL_BLOCK_BYTES hold, up to KERNEL_ROWS, rounded down to whole tiles of TILE_ROWS for every thread (at least
    that). The kernel makes and reduces a tile's rows in its cache, so a larger block costs no more there and fewer
    blocks fewer fixed costs; whole tiles for every thread keep both cores busy (28 rows on 2 threads were 3 tiles,
    12 + 12 rows for one thread, 4 for the other). A 32,768-token run of a 4-layer model of SmolLM2's shape: 58.7-62.2
    s in blocks of 28 rows, 55.6 s of 24, 43.0-51.4 s of 72."""
    if rows < block_bytes // row_bytes:
        return rows
    whole = TILE_ROWS * torch.get_num_threads()
    rows = max(rows, min(KERNEL_ROWS, KERNEL_BLOCK_BYTES // row_bytes))
    return max(whole, rows - rows % whole)
