#!/usr/bin/env bash
# The GPU checks as one command, on a machine with an NVIDIA GPU: `make test-gpu` (tests/gpu), then
# `python -m bench.gpu_capture`, everything they print written to LOG as well (default test-artifacts/gpu_check.log).
#
#   bash scripts/gpu_check.sh [LOG]
#
# The environment: .venv, where its torch sees the GPU (make sets it up, with the CUDA build where nvidia-smi finds a
# GPU). Where it does not but the machine's python3 has a CUDA build of torch (a lent GPU machine without a package
# index: its image holds torch, transformers, accelerate and pytest), build/gpu-venv reads python3's packages and gets
# this project installed editable, offline, and make is told that it is set up; failing that, python3 itself. Wheels
# in GPU_CHECK_WHEELS (default build/wheels, where present) go into build/gpu-venv first, without their dependencies:
# the transformers CI tests with, say, where the machine's is older.
# The benchmark takes BENCH_SHAPES, BENCH_TOKENS, BENCH_ROUNDS and BENCH_BLOCKS as ever (docs/performance.md);
# GPU_CHECK_BENCH_SECONDS (default 300) bounds it so that the log ends within a lent machine's time: what it measured
# by then is printed, and the log says that it was stopped.
set -u -o pipefail
cd "$(dirname "$0")/.."
LOG=${1:-test-artifacts/gpu_check.log}
BENCH_SECONDS=${GPU_CHECK_BENCH_SECONDS:-300}
OVERLAY=build/gpu-venv
WHEELS=${GPU_CHECK_WHEELS:-build/wheels}
mkdir -p "$(dirname "$LOG")"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1

sees_gpu() {  # whether this python's torch sees a CUDA device
  "$1" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1
}

install_here() {  # this project, editable, into the environment of python $1, without a package index
  "$1" -m pip install -q --no-index --no-deps --no-build-isolation -e . &&
    { "$1" -m attention_atlas.model.core.attention.native || true; }  # the CPU's kernel, where a compiler is
}

overlay() {  # a venv in $OVERLAY that reads python3's packages, this project installed into it
  [ -e "$OVERLAY/.dev" ] && return 0
  python3 -m venv --without-pip "$OVERLAY" || return 1
  local theirs ours
  theirs=$(python3 -c "import site; print(site.getsitepackages()[0])") || return 1
  ours=$("$OVERLAY/bin/python" -c "import site; print(site.getsitepackages()[0])") || return 1
  echo "import site; site.addsitedir('$theirs')" >"$ours/_python3_packages.pth"
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "== into $OVERLAY: $(cd "$WHEELS" && echo *.whl)"
    "$OVERLAY/bin/python" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || return 1
    if ! "$OVERLAY/bin/python" -c "import transformers" >/dev/null 2>&1; then
      echo "== transformers does not import with the wheels of $WHEELS: put only its own there (docs/performance.md)"
      return 1
    fi
  fi
  sees_gpu "$OVERLAY/bin/python" && install_here "$OVERLAY/bin/python" || return 1
  touch "$OVERLAY/.runtime" && touch "$OVERLAY/.dev"  # make's marks: set up (make would reach for an index)
}

checks() {
  local venv=.venv py=.venv/bin/python
  if ! sees_gpu .venv/bin/python && sees_gpu python3; then
    echo "== .venv has no torch that sees the GPU, python3's has: $OVERLAY reads python3's packages"
    if overlay; then
      venv=$OVERLAY py=$OVERLAY/bin/python
    else
      echo "== $OVERLAY could not be set up: this project goes into python3's own environment"
      venv="" py=$(command -v python3)
      install_here "$py" || { echo "== could not install this project offline"; return 1; }
    fi
  fi
  echo "== $(date -u '+%Y-%m-%d %H:%M UTC'); $(nvidia-smi -L 2>/dev/null | head -1)"
  "$py" -c "import torch, transformers as t; print('== torch', torch.__version__, 'transformers', t.__version__)" || true
  local start=$SECONDS tests=0 bench=0
  echo "== make test-gpu"
  if [ -n "$venv" ] && command -v make >/dev/null 2>&1; then
    make test-gpu VENV="$venv" || tests=$?
  else  # the same as make test-gpu runs
    "$py" -m pytest tests/gpu -m gpu -rs -p no:tests.chromium || tests=$?
  fi
  echo "== make test-gpu: exit $tests, $((SECONDS - start)) s"
  start=$SECONDS
  echo "== python -m bench.gpu_capture (stopped after $BENCH_SECONDS s)"
  timeout --signal=INT --kill-after=20 "$BENCH_SECONDS" "$py" -m bench.gpu_capture || bench=$?
  [ "$bench" -eq 124 ] && echo "== bench.gpu_capture was stopped: the shapes above are what it measured"
  echo "== bench.gpu_capture: exit $bench, $((SECONDS - start)) s"
  return "$tests"
}

checks 2>&1 | tee "$LOG"
