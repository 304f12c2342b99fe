"""Strict saves: a failed checkpoint save that Agent Framework cannot swallow.

Agent Framework calls ``save`` from its runner's ``create_checkpoint_if_enabled``, inside an
``except Exception`` block that logs a warning and lets the run go on. With
``MongoDBCheckpointStorageOptions.strict_saves`` on, ``save`` re-raises its failure as
:class:`MongoDBStrictSaveFailure`, a ``BaseException`` that this block (and the workflow's own
``except Exception`` that emits ``failed`` events) does not catch, so the run stops at the
failed checkpoint and the caller's ``await workflow.run(...)`` raises it. The storage's own
error stays inspectable as ``error`` and ``__cause__``. See docs/adr/0011-strict-saves.md.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager

from ..errors import MongoDBIntegrationError

__all__ = ["UNEXPECTED_CATEGORY", "MongoDBStrictSaveFailure", "escalated_save_failures"]

UNEXPECTED_CATEGORY = "unexpected"
"""The ``category`` of a strict failure whose error is not one of the package's own."""


class MongoDBStrictSaveFailure(BaseException):
    """A checkpoint save failed while ``strict_saves`` was on; the workflow run stops here.

    A ``BaseException``, deliberately: Agent Framework catches ``Exception`` around every
    checkpoint save and carries on. Catch this class by name (``except Exception`` does not).

    Attributes:
        error: What the save raised, usually a :class:`MongoDBIntegrationError`; also the
            ``__cause__``.
        category: ``error.category`` for the package's errors, else ``"unexpected"``.
        retryable: ``error.retryable`` for the package's errors, else ``False``. Whether
            saving the same checkpoint again is safe and may succeed; the run itself has
            stopped and is resumed from its latest stored checkpoint, if any.
    """

    error: Exception
    category: str
    retryable: bool

    def __init__(self, error: Exception) -> None:
        super().__init__(
            f"Checkpoint save failed ({_category_of(error)}); strict_saves stops the workflow run."
        )
        self.error = error
        self.category = _category_of(error)
        self.retryable = error.retryable if isinstance(error, MongoDBIntegrationError) else False


def _category_of(error: Exception) -> str:
    return error.category if isinstance(error, MongoDBIntegrationError) else UNEXPECTED_CATEGORY


@contextmanager
def escalated_save_failures(enabled: bool) -> Generator[None]:
    """Turn a failed save into :class:`MongoDBStrictSaveFailure` when ``enabled``.

    Only ``Exception`` is escalated: cancellation and other ``BaseException``\\ s pass unchanged.
    """
    try:
        yield
    except Exception as error:
        if not enabled:
            raise
        raise MongoDBStrictSaveFailure(error) from error
