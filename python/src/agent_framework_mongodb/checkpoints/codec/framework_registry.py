"""Whether Agent Framework's checkpoint type registry holds a class, whenever it was registered.

``agent_framework.register_checkpoint_type(cls)`` adds a class to a process-wide set that the
framework's own restricted decoder consults. The set has no public reader, so the codec asks
the decoder itself: it hands the framework's ``decode_checkpoint_value`` a class reference
written by this module (never a stored payload) and sees whether the decoder resolves it.
That answers for registrations made before and after this package was imported, and leaves the
framework untouched. With Agent Framework Core 1.13 (no registry) every answer is "no".
See ``docs/adr/0009-codec-v2.md``.
"""

from __future__ import annotations

import base64
import importlib
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Final, cast

__all__ = ["is_registered_with_framework"]

_ENCODING_MODULE: Final = "agent_framework._workflows._checkpoint_encoding"
_Decoder = Callable[..., object]

_registered: set[type] = set()
_lock = threading.Lock()


def _framework_decoder() -> _Decoder | None:
    # Resolved when this package is imported, never on a load's behalf: a payload must not be
    # the reason a module gets imported.
    if not hasattr(importlib.import_module("agent_framework"), "register_checkpoint_type"):
        return None  # Agent Framework Core 1.13 has no registry.
    module = importlib.import_module(_ENCODING_MODULE)
    return cast("_Decoder | None", getattr(module, "decode_checkpoint_value", None))


_DECODER: Final = _framework_decoder()


def is_registered_with_framework(cls: type) -> bool:
    """Whether ``cls`` was registered with ``agent_framework.register_checkpoint_type``.

    Registrations are never withdrawn, so a "yes" is remembered; a "no" is asked again.
    """
    if cls in _registered:
        return True
    # The decoder also accepts its own built-in value types (object, complex, OrderedDict, ...),
    # all from the standard library; only a class defined elsewhere can answer "registered".
    if cls.__module__.partition(".")[0] in sys.stdlib_module_names:
        return False
    decode = _DECODER
    if decode is None:
        return False
    envelope = {
        "__pickled__": base64.b64encode(_class_reference_pickle(cls)).decode("ascii"),
        "__type__": f"{type(cls).__module__}:{type(cls).__qualname__}",
    }
    try:
        # An empty allow-list: the decoder then accepts only its built-ins, its own families
        # and the registry; the codec asks only about classes outside the first two.
        resolved = decode(envelope, allowed_types=frozenset())
    except Exception:
        return False
    if resolved is not cls:
        return False
    with _lock:
        _registered.add(cls)
    return True


def _class_reference_pickle(cls: type) -> bytes:
    """A protocol-4 pickle that names ``cls`` and nothing else, written opcode by opcode.

    ``pickle.dumps(cls)`` would consult process-global reducers and extension codes; this
    cannot.
    """
    parts = bytearray(pickle.PROTO + b"\x04")
    for text in (cls.__module__, cls.__qualname__):
        data = text.encode("utf-8")
        parts += pickle.BINUNICODE + len(data).to_bytes(4, "little") + data
    parts += pickle.STACK_GLOBAL + pickle.STOP
    return bytes(parts)
