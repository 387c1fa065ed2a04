#!/bin/sh
# Install PyTorch into the virtual environment whose python is $1, unless it already has one:
# the CUDA build from PyPI where an NVIDIA GPU is present, else a CPU-only build (a few hundred MB
# instead of PyPI's multi-GB CUDA build). TORCH_CPU_SPEC overrides the CPU version.
set -eu
PY="$1"
if "$PY" -c "import torch" 2>/dev/null; then
  exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  exec "$PY" -m pip install "torch>=2.4"
fi
exec "$PY" -m pip install --retries 1 "${TORCH_CPU_SPEC:-torch==2.13.0}" \
  --extra-index-url https://download.pytorch.org/whl/cpu
