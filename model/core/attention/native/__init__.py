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

from attention_atlas.model.core.cache_folder import cache_dir

SOURCE = Path(__file__).with_name("attention_rows.c")
FLAGS = ("-O3", "-march=native", "-fPIC", "-ffast-math", "-fno-finite-math-only",
         "-fopenmp-simd")  # the machine's vector unit; the `omp simd` reductions vectorised in both builds
OPENMP_RUNTIME = re.compile(rb"lib(?:gomp|omp|iomp5)[\w.-]*?\.(?:so(?:\.\d+)*|dylib)")  # a runtime's file name
DISABLE = "ATTENTION_ATLAS_NO_NATIVE"  # set (to anything) to use the torch ops only
_build_lock = threading.Lock()
_log = logging.getLogger(__name__)
_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
_ARGUMENTS = (_P, _P, _L, _I, _I, _I, _I, _L, _I, _F, _P, _I, _P, _P, _I, _P, _P, _I)
_QUERIES = (_P, _P, _L, _I, _I, _P, _L, _I, _P, _L)  # attention_rows_from_queries: before attention_rows's


@cache
def attention_rows() -> ctypes._CFuncPtr | None:
    """The compiled kernel's `attention_rows` (attention_rows.c says what it computes), or None where it cannot be
    had (no C compiler, a failed build, or $ATTENTION_ATLAS_NO_NATIVE set)."""
    if os.environ.get(DISABLE):
        return None
    with _build_lock:
        library = _joins_the_process(_built(openmp=True)) or _built(openmp=False)
    if library is None:
        return None
    try:
        return loaded(library)
    except (OSError, AttributeError) as error:  # a library this process cannot load (its OpenMP, say)
        _log.warning("The CPU kernel %s did not load; attention summaries use torch ops (slower): %s", library, error)
        return None


def loaded(library: Path) -> ctypes._CFuncPtr:
    """The `attention_rows` of a built library, ready to call (`run_kernel`); its `from_queries`: the library's
    `attention_rows_from_queries`, which makes a block's scores itself, or None where it cannot (no AVX-512)."""
    shared = ctypes.CDLL(str(library))
    function = shared.attention_rows
    function.argtypes, function.restype = _ARGUMENTS, None
    makes_scores = hasattr(shared, "makes_scores") and shared.makes_scores()  # (an older kernel's has none: kernel_ab)
    function.from_queries = shared.attention_rows_from_queries if makes_scores else None
    if function.from_queries is not None:
        function.from_queries.argtypes, function.from_queries.restype = _QUERIES + _ARGUMENTS, None
    return function


def _built(openmp: bool, source: Path = SOURCE, flags: tuple[str, ...] = FLAGS) -> Path | None:
    """The library for `source` (the kernel's), the compiler and processor, with OpenMP or without, built into the
    user cache unless it is there (None: no compiler, or the build failed; Apple's clang has no OpenMP). `source` and
    `flags`: another version of the kernel, or other flags, side by side with this one (bench/kernel_ab.py, tests)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        _log.warning("No C compiler found: attention summaries use torch ops on the CPU (slower).")
        return None
    flags = [*flags, *(["-fopenmp"] if openmp else [])]
    key = hashlib.sha256(source.read_bytes() + repr((flags, compiler, platform.machine(), _cpu_flags())).encode())
    target = cache_dir() / "native" / f"attention_rows-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built, obj = Path(scratch) / target.name, Path(scratch) / "attention_rows.o"
        compile_and_link = ([compiler, *flags, "-c", str(source), "-o", str(obj)],
                            [compiler, "-shared", *flags[-1:] * openmp, str(obj), "-o", str(built), "-lm"])
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


def _cpu_flags() -> str:
    """The processor's feature flags (Linux), so a cache shared by machines of other processors builds anew."""
    try:
        return next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return ""


def _pointer(array: torch.Tensor | np.ndarray) -> int:
    return array.data_ptr() if isinstance(array, torch.Tensor) else array.ctypes.data


def run_kernel(kernel: ctypes._CFuncPtr, scores: torch.Tensor, allowed: torch.Tensor | np.ndarray, first: int,
               query0: int, positional: bool, floor_bits: float, thumb_starts: np.ndarray, thumb: torch.Tensor,
               roll_starts: np.ndarray | None, roll: torch.Tensor | None, stats: torch.Tensor,
               queries: tuple[torch.Tensor, torch.Tensor] | None = None,
               values: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Call the kernel on one block: scores (heads, rows, width), the probabilities once it returns, allowed
    (rows, >= width) bool, thumb (heads, rows, len(thumb_starts) - 1), roll (rows, len(roll_starts) - 1) or None,
    stats (heads, rows, 5); every tensor float32, contiguous, on the CPU; starts int32, ending at width or after;
    floor_bits in [-126, 0] (2^x of those is a normal float). With `queries`, (query (heads, rows, d) in bits,
    contiguous; keys (kv_heads, d, >= width), each of the d rows contiguous), the kernel's `from_queries` makes the
    scores itself (query . keys of its group's key head) before it reduces them: `scores` is where they go; with
    `values` as well, (value (kv_heads, >= width, dv) contiguous, output (heads, rows, dv), its rows contiguous), it
    writes attention's output, the probabilities times the values of their group's value head, into `output`."""
    heads, rows, width = scores.shape
    allowed = np.ascontiguousarray(allowed) if isinstance(allowed, np.ndarray) else allowed.contiguous()
    outputs = (thumb, stats) if roll is None else (thumb, stats, roll)
    if (allowed.dtype not in (np.bool_, torch.bool) or not -126.0 <= floor_bits <= 0.0
            or allowed.shape[0] != rows or allowed.shape[1] < width
            or thumb.shape != (heads, rows, len(thumb_starts) - 1)
            or stats.shape != (heads, rows, 5) or (roll is None) != (roll_starts is None)
            or (roll is not None and roll.shape != (rows, len(roll_starts) - 1))
            or any(starts.dtype != np.int32 or not starts.flags.c_contiguous or starts[-1] < width
                   for starts in (thumb_starts, roll_starts) if starts is not None)
            or (isinstance(allowed, torch.Tensor) and allowed.device.type != "cpu")
            or any(t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu"
                   for t in (scores, *outputs))
            or (queries is not None and not _reads_queries(kernel, queries, heads, rows, width))
            or (values is not None and (queries is None or not _reads_values(values, queries[1], heads, rows, width)))):
        raise ValueError("attention_rows: arrays of other shapes, types or layouts than it reads and writes")
    row_stride = allowed.strides[0] if isinstance(allowed, np.ndarray) else allowed.stride(0)
    arguments = (scores.data_ptr(), _pointer(allowed), row_stride, heads, rows, width, first, query0,
                 int(positional), floor_bits, thumb_starts.ctypes.data, len(thumb_starts) - 1, thumb.data_ptr(),
                 None if roll_starts is None else roll_starts.ctypes.data,
                 0 if roll_starts is None else len(roll_starts) - 1, None if roll is None else roll.data_ptr(),
                 stats.data_ptr(), torch.get_num_threads())
    if queries is None:
        kernel(*arguments)
        return
    query, keys = queries
    value, output = values if values is not None else (None, None)
    kernel.from_queries(query.data_ptr(), keys.data_ptr(), keys.stride(1), query.shape[-1], heads // len(keys),
                        None if value is None else value.data_ptr(), 0 if value is None else value.stride(0),
                        0 if value is None else value.shape[2], None if output is None else output.data_ptr(),
                        0 if output is None else output.stride(0),
                        *arguments)


def _reads_queries(kernel: ctypes._CFuncPtr, queries: tuple[torch.Tensor, torch.Tensor], heads: int, rows: int,
                   width: int) -> bool:
    """Whether the kernel makes scores and `queries` are what it reads for a block of (heads, rows, width) scores."""
    query, keys = queries
    return (getattr(kernel, "from_queries", None) is not None and query.shape[:2] == (heads, rows)
            and query.is_contiguous() and keys.ndim == 3 and keys.shape[1] == query.shape[-1]
            and keys.shape[2] >= width and len(keys) > 0 and heads % len(keys) == 0
            and (keys.stride(2) == 1 or keys.shape[2] == 1)  # (a dimension of one: any stride)
            and keys.stride(0) == keys.shape[1] * keys.stride(1) and keys.stride(1) >= width
            and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in (query, keys)))


def _reads_values(values: tuple[torch.Tensor, torch.Tensor], keys: torch.Tensor, heads: int, rows: int,
                  width: int) -> bool:
    """Whether `values` are a value head for each key head, and an output of (heads, rows, dv) the kernel can write."""
    value, output = values
    return (value.shape[0] == len(keys) and value.shape[1] >= width and value.shape[2] > 0
            and value[0].is_contiguous() and output.shape == (heads, rows, value.shape[2]) and output[0].is_contiguous()
            and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in (value, output)))
