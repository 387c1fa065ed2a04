"""The two ways a request is carried (nnsight backends), and how what comes back is read.

`Simulated`: the request serialised as for NDIF and deserialised with an unpickler that refuses any class or function
from outside what NDIF's servers have (torch, numpy, transformers, nnsight, the standard library), so a request that
needed this project there fails here too; then run on the model loaded here. `watched`: nnsight's RemoteBackend, its
status stream told to the run's listener (model/ndif/status.py) and checked against a deadline. Both count the
request's bytes (`sent`) and the result's (`received`). A result is read as tensors, numbers and containers only
(`read_result`): nothing the server sends can run code here.
"""

from __future__ import annotations

import io
import linecache
import pickle
import sys
import time
import types
from typing import Any

import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.ndif.status import tell

SERVER_ROOTS = {"torch", "numpy", "transformers", "accelerate", "einops", "nnsight", "cloudpickle",  # NDIF has them
                "builtins", "collections", "copyreg", "_codecs", "functools", "typing", "types", "math", "operator"}


class _ResultUnpickler(pickle.Unpickler):
    """Reads tensors, numbers and containers, nothing else: a result names no other class or function."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] not in RESULT_ROOTS:
            raise pickle.UnpicklingError(f"a result from NDIF names {module}.{name}, which it never should")
        return super().find_class(module, name)


RESULT_ROOTS = {"torch", "collections", "builtins", "_codecs"}
_RESULT_PICKLE = types.SimpleNamespace(Unpickler=_ResultUnpickler, __name__="ndif_result")  # as torch.load wants it


def read_result(content: bytes) -> Any:
    """A torch.save blob from NDIF read without running anything it names (torch's own weights-only reader does not
    read pickle protocol 4, NDIF's)."""
    return torch.load(io.BytesIO(content), map_location="cpu", weights_only=False, pickle_module=_RESULT_PICKLE)


def _strict_unpickler() -> type:
    from nnsight.intervention.serialization import CustomCloudUnpickler

    class Strict(CustomCloudUnpickler):
        """Refuses what NDIF's servers would not have."""

        def find_class(self, module: str, name: str) -> Any:
            root = module.split(".")[0]
            if root not in SERVER_ROOTS and root not in sys.stdlib_module_names:
                raise UserError(f"The request needs {module}.{name}, which NDIF's servers do not have: it cannot "
                                "run there.")
            return super().find_class(module, name)

    return Strict


class Simulated:
    """nnsight's serialisation round trip, here: the request serialised as for NDIF, deserialised strictly, run on the
    model loaded here. Counts the request's bytes (`sent`; the result's are counted by `send`)."""

    def __init__(self, model: Any) -> None:
        self.model, self.sent, self.received = model, 0, 0

    def __call__(self, tracer: Any) -> None:
        from nnsight.schema.request import RequestModel

        tell("NDIF (simulated): received")
        blob = RequestModel.serialize(tracer, compress=False)
        self.sent = len(blob)
        filename = tracer.info.frame.f_code.co_filename
        saved_line = linecache.cache.get(filename)  # deserialising registers the block's source under its file
        try:
            restored = RequestModel.deserialize(blob, self.model._remoteable_persistent_objects(), compress=False,
                                                unpickler=_strict_unpickler())
        except pickle.UnpicklingError as error:
            raise UserError(f"The request could not be read back as NDIF would read it ({error}).") from error
        finally:
            if saved_line is not None:
                linecache.cache[filename] = saved_line
            else:
                linecache.cache.pop(filename, None)
        tell("NDIF (simulated): running")
        tracer.info.code = restored.info.code
        tracer.execute(tracer.info.code)


def _remote_base() -> type:
    from nnsight.intervention.backends.remote import RemoteBackend

    return RemoteBackend


class _Listener:
    """Stands in for nnsight's status display: tells each status to the run's listener, and, every tenth of a second
    while the request waits, how long it has waited (where the listener may stop it); past the deadline, stops it."""

    enabled, verbose = True, False

    def __init__(self, timeout_s: float) -> None:
        self.started, self.timeout_s, self.words = time.monotonic(), timeout_s, "NDIF: sending"

    def update(self, response: Any) -> None:
        status = str(getattr(response.status, "value", response.status)).lower()
        if status != "log":
            self.words = f"NDIF: {status}"
        tell(self.words)

    def refresh(self) -> None:
        waited = time.monotonic() - self.started
        if waited > self.timeout_s:
            raise UserError(f"NDIF did not finish the run within {self.timeout_s:.0f} s (its queue may be long): "
                            "try again later, or a shorter text.")
        tell(f"{self.words} ({waited:.0f} s)")


def watched(model_key: str, key: str, timeout_s: float) -> Any:
    """nnsight's RemoteBackend (imported only here: a request to send), blocking, with `key`, its statuses told to the
    run's listener and its bytes counted."""
    base = _remote_base()

    class Backend(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__(model_key, api_key=key, blocking=True)
            self.display = _Listener(timeout_s)
            self.sent = self.received = 0

        def _serialize(self, tracer: Any) -> bytes:
            blob = super()._serialize(tracer)
            self.sent = len(blob)
            return blob

        def finalize(self, content: bytes) -> Any:
            self.received = len(content)
            if self.compress:
                import zstandard

                content = zstandard.ZstdDecompressor().decompress(content)
            return read_result(content)

    return Backend()
