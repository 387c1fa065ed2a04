"""The native CPU kernel (model/core/attention/native) as a build: compiled once into the user cache under its
compiler's target, never run on a processor without what it was built for, guarded against arrays it would reach
past (tests/model/test_native_guard.py: every argument), the same numbers from a build for any x86 processor, and
never a second OpenMP runtime. What it computes is held to the whole softmax in tests/model/test_row_reduction.py."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from attention_atlas.model.core.attention import native
from attention_atlas.model.core.attention.block_means import block_starts


def test_the_kernel_is_compiled_once_into_the_user_cache(monkeypatch, tmp_path) -> None:
    """A machine with a C compiler (every CI run) gets the kernel, built into the user cache and found there next
    time; a compiler that fails, or none, leaves the torch ops to do the work, as does ATTENTION_ATLAS_NO_NATIVE."""
    import shutil

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine")
    kernel = native.attention_rows()  # this process's
    assert kernel is not None
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path))
    built = native._built(openmp=True)
    assert built is not None and built.parent == tmp_path / "native" and list(built.parent.iterdir()) == [built]
    modified = built.stat().st_mtime_ns
    assert native._built(openmp=True) == built and built.stat().st_mtime_ns == modified  # found, not built again
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path / "other"))
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    assert native._built(openmp=True) is None and native._built(openmp=False) is None
    monkeypatch.setenv("ATTENTION_ATLAS_NO_NATIVE", "1")
    assert native.attention_rows.__wrapped__() is None
    assert native.attention_rows() is kernel  # loaded once a process



def test_a_build_is_cached_under_its_compilers_target(monkeypatch) -> None:
    """The cached library's name hashes the macros the compiler predefines for its flags, so another processor's
    `-march=native` (other instruction sets: other macros), on any OS, gets a build of its own; the same macros the
    same name. The real probe tells this processor's target from the compiler's default one."""
    import shutil

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler on this machine")
    machine, default = native.target_macros(compiler, native.FLAGS), native.target_macros(compiler, native.PORTABLE)
    assert machine is not None and default is not None and machine != default  # -march=native adds to the default
    assert native.target_macros("false", native.FLAGS) is None  # a compiler that does not run

    def name(macros: bytes | None) -> str | None:
        monkeypatch.setattr(native, "target_macros", lambda compiler, flags: macros)
        return native.library_name(native.SOURCE, compiler, list(native.FLAGS))

    avx512 = name(b"#define __AVX512F__ 1\n#define __x86_64__ 1")
    assert avx512 != name(b"#define __AVX2__ 1\n#define __x86_64__ 1") and avx512 != name(b"#define __aarch64__ 1")
    assert name(b"#define __AVX512F__ 1\n#define __x86_64__ 1") == avx512 and name(None) is None


def test_a_processor_without_what_the_build_used_gets_a_build_for_any(monkeypatch, tmp_path) -> None:
    """A processor simulated without AVX-512 (where the build has it; else without any extension it used): the
    machine's build is refused before any of its code runs, and `attention_rows()` loads a build for the compiler's
    default target instead, which makes no scores itself and gives the machine's build's numbers."""
    kernel = native.attention_rows()
    if kernel is None:
        pytest.skip("the native kernel is not built here")
    used = native.built_for(ctypes.CDLL(str(kernel.library)))
    if not used:
        pytest.skip("this build uses no extension a processor of its kind may lack")
    lacking = {"avx512f"} if "avx512f" in used else set(used)
    has = native._processor_has
    assert all(has(ctypes.CDLL(str(kernel.library)), name) for name in used)  # this processor's
    monkeypatch.setattr(native, "_processor_has", lambda shared, name: name not in lacking and has(shared, name))
    with pytest.raises(native.UnfitProcessor, match=sorted(lacking)[0]):
        native.loaded(kernel.library)
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path))
    portable = native.attention_rows.__wrapped__()
    assert portable is not None and portable.library.parent == tmp_path / "native"
    assert lacking.isdisjoint(native.built_for(ctypes.CDLL(str(portable.library))))
    assert portable.from_queries is None or "avx512f" not in lacking
    _same_numbers(kernel, portable, 160)


def test_the_kernel_refuses_arrays_it_would_read_or_write_outside_of() -> None:
    """A mask shorter than the scores' keys, or outputs of another shape, raise instead of reaching past them."""
    kernel = native.attention_rows()
    if kernel is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    scores, starts = torch.zeros(2, 4, 10), block_starts(10, 5).astype(np.int32)
    thumb, stats = torch.empty(2, 4, 5), torch.empty(2, 4, 5)
    native.run_kernel(kernel, scores, np.ones((4, 10), dtype=bool), 0, 0, True, -112.0, starts, thumb, None, None,
                      stats)
    np.testing.assert_allclose(thumb.numpy(), 0.2)  # every key alike: two keys a column block
    for bad in ({"allowed": np.ones((4, 9), dtype=bool)}, {"thumb": torch.empty(2, 4, 4)},
                {"stats": torch.empty(2, 3, 5)}, {"scores": torch.zeros(2, 4, 10, dtype=torch.float64)},
                {"thumb_starts": block_starts(8, 5).astype(np.int32)},  # ends before the scores' keys
                {"floor_bits": -200.0}):
        arguments = {"scores": scores, "allowed": np.ones((4, 10), dtype=bool), "first": 0, "query0": 0,
                     "positional": True, "floor_bits": -112.0, "thumb_starts": starts, "thumb": thumb,
                     "roll_starts": None, "roll": None, "stats": stats} | bad
        with pytest.raises(ValueError, match="attention_rows"):
            native.run_kernel(kernel, **arguments)


@pytest.mark.parametrize("keys", [160, 2048])
def test_a_build_for_any_x86_processor_gives_the_machines_numbers(monkeypatch, tmp_path, keys) -> None:
    """The kernel built for a processor without AVX-512 (its column sums one block at a time) makes what this machine's
    build makes (on an AVX-512 machine: short column blocks summed by gathers) for thumbnail and rollout blocks of a
    few keys and of many, the last blocks past a causal block's keys."""
    import platform

    kernel = native.attention_rows()
    if kernel is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the native kernel is not built here, or this is no x86 processor")
    monkeypatch.setenv("ATTENTION_ATLAS_CACHE", str(tmp_path))
    flags = tuple("-march=x86-64-v2" if flag == "-march=native" else flag for flag in native.FLAGS)
    library = native._built(openmp=False, flags=flags)
    if library is None:
        pytest.skip("this compiler does not build for -march=x86-64-v2")
    _same_numbers(kernel, native.loaded(library), keys)


def _same_numbers(kernel, other, keys: int) -> None:
    """Two builds reduce a causal block (keys up to its last row computed, 60 after them) to the same numbers, for
    thumbnail and rollout blocks of a few keys and of many, the last blocks past the block's keys."""
    rng = np.random.default_rng(5)
    heads, rows, start = 3, 40, keys - 100  # a causal block: keys up to its last row computed, 60 after them
    width = start + rows
    scores = torch.from_numpy(rng.normal(size=(heads, rows, width)).astype(np.float32) * 4)
    allowed = np.tril(np.ones((rows, width), dtype=bool), start)
    for thumbnail, rollout in ((64, 512), (keys // 8, keys // 3), (keys, keys)):
        layout = [block_starts(keys, thumbnail).astype(np.int32), block_starts(keys, rollout).astype(np.int32)]
        made = []
        for way in (kernel, other):
            p, thumb = scores.clone(), torch.empty(heads, rows, len(layout[0]) - 1)
            roll, stats = torch.empty(rows, len(layout[1]) - 1), torch.empty(heads, rows, 5)
            native.run_kernel(way, p, allowed, start, start, True, -112.0, layout[0], thumb, layout[1], roll, stats)
            made.append((p, thumb, roll, stats))
        for ours, theirs in zip(*made, strict=True):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-7)
        assert float(made[0][1][..., -1].abs().max()) == 0.0  # a thumbnail block after the block's keys: 0


@pytest.mark.parametrize(("kv_heads", "group", "d_head", "rows", "width"),
                         [(3, 3, 64, 113, 1000), (2, 1, 32, 13, 77), (1, 4, 128, 6, 64), (1, 1, 8, 1, 1)])
def test_scores_made_in_the_kernel_give_what_it_makes_from_torchs(kv_heads, group, d_head, rows, width) -> None:
    """Where it has AVX-512 the kernel makes a block's scores itself, a few rows at a time reduced while in the cache,
    and attention's output from them (`from_queries`): the same probabilities, thumbnails, rollout sums and statistics
    as from the scores of torch's product, and torch's P V (SmolLM2's grouped heads, MiniLM's head size, rows and keys
    that fill no whole tile, values of another size than the keys)."""
    kernel = native.attention_rows()
    if kernel is None or kernel.from_queries is None:
        pytest.skip("the native kernel is not built here, or it was built without AVX-512")
    rng = np.random.default_rng(7)
    heads, start = kv_heads * group, width - rows  # a causal block's last rows
    query = torch.from_numpy(rng.normal(size=(heads, rows, d_head)).astype(np.float32))
    keys = torch.from_numpy(rng.normal(size=(kv_heads, d_head, width + 5)).astype(np.float32))  # more keys than read
    allowed = np.tril(np.ones((rows, width), dtype=bool), start)
    layout = [block_starts(width, min(width, size)).astype(np.int32) for size in (64, 512)]  # thumbnail, rollout
    products = torch.matmul(query.view(kv_heads, -1, d_head), keys[..., :width]).view(heads, rows, width)
    value = torch.from_numpy(rng.normal(size=(kv_heads, width + 5, d_head + 3)).astype(np.float32))
    output = torch.full((heads, rows + 4, d_head + 3), np.nan)  # a block of 4 rows more: its rows 2.. written
    made = []
    for scores, queries in ((products.clone(), None), (torch.full_like(products, np.nan), (query, keys))):
        thumb = torch.empty(heads, rows, len(layout[0]) - 1)
        roll, stats = torch.empty(rows, len(layout[1]) - 1), torch.empty(heads, rows, 5)
        native.run_kernel(kernel, scores, allowed, start, start, True, -112.0, layout[0], thumb, layout[1], roll,
                          stats, queries, None if queries is None else (value, output[:, 2 : 2 + rows]))
        made.append((scores, thumb, roll, stats))
    for ours, torchs in zip(made[1], made[0], strict=True):
        np.testing.assert_allclose(ours.numpy(), torchs.numpy(), rtol=1e-5, atol=1e-7)
    p = made[0][0]  # the probabilities from torch's scores
    np.testing.assert_allclose(p.sum(-1).numpy(), 1.0, atol=1e-5)  # every row's
    expected = torch.matmul(p.view(kv_heads, -1, width), value[:, :width]).view(heads, rows, -1)
    np.testing.assert_allclose(output[:, 2 : 2 + rows].numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert output[:, :2].isnan().all() and output[:, 2 + rows :].isnan().all()  # nothing written outside


def test_the_kernel_never_brings_a_second_openmp_runtime(monkeypatch) -> None:
    """Where the process holds another OpenMP runtime than the one the kernel was linked with (a Homebrew libomp
    beside torch's: "OMP: Error #15" aborts the process), or where the loaded libraries cannot be listed, the build
    without OpenMP is loaded; with the runtime torch loaded, the OpenMP build."""
    if native.attention_rows() is None:
        pytest.skip("no C compiler here: the native kernel is not built")
    with_openmp = native._built(openmp=True)
    needed = set(native.OPENMP_RUNTIME.findall(with_openmp.read_bytes()))
    if not needed:
        pytest.skip("this compiler builds no OpenMP")
    loaded = native.loaded_openmp_runtimes()  # None where the loaded libraries cannot be listed
    assert loaded is not None and loaded >= {name.decode() for name in needed}  # torch's, under the same name
    assert native._joins_the_process(with_openmp) == with_openmp
    serial = native._built(openmp=False)
    assert not native.OPENMP_RUNTIME.findall(serial.read_bytes())
    for other in ({"libomp.dylib"}, None):
        monkeypatch.setattr(native, "loaded_openmp_runtimes", lambda other=other: other)
        assert native._joins_the_process(with_openmp) is None
        assert native._joins_the_process(serial) == serial
        kernel = native.attention_rows.__wrapped__()  # the serial build, and it computes
        scores, thumb, stats = torch.zeros(1, 2, 4), torch.empty(1, 2, 2), torch.empty(1, 2, 5)
        native.run_kernel(kernel, scores, np.ones((2, 4), dtype=bool), 0, 0, True, -112.0,
                          block_starts(4, 2).astype(np.int32), thumb, None, None, stats)
        np.testing.assert_allclose(thumb.numpy(), 0.5)
