"""Checks of the six protocol methods on checkpoints the suite makes up."""

from __future__ import annotations

import copy
import inspect
from datetime import datetime, timedelta, timezone

from agent_framework import CheckpointStorage, Message, WorkflowCheckpoint, WorkflowCheckpointException

from ._compare import first_difference
from ._registry import CheckContext, CheckFailedError, check
from ._workflows import Claim

__all__ = ["PROTOCOL_METHODS", "make_checkpoint"]

PROTOCOL_METHODS = ("save", "load", "list_checkpoints", "list_checkpoint_ids", "get_latest", "delete")
"""The protocol's methods, the same in agent-framework-core 1.13 and later."""

_LISTING_METHODS = ("list_checkpoints", "list_checkpoint_ids", "get_latest")
_START = datetime(2026, 1, 1, tzinfo=timezone.utc)

# Suffixes whose alphabetical order is not the save order, so a storage that sorts its listings
# by checkpoint id (or returns them in a hash's order) is told apart from one that keeps save order.
_SUFFIXES = ("m", "c", "x", "a", "q", "f", "t", "b")


def make_checkpoint(  # noqa: PLR0913 - every field a check varies, by keyword
    context: CheckContext,
    index: int,
    *,
    previous: str | None = None,
    timestamp: datetime | None = None,
    state: dict[str, object] | None = None,
    workflow_name: str | None = None,
) -> WorkflowCheckpoint:
    """The check's ``index``-th checkpoint: a minute after the one before, unless told otherwise."""
    return WorkflowCheckpoint(
        workflow_name=context.workflow_name if workflow_name is None else workflow_name,
        graph_signature_hash="conformance-graph",
        checkpoint_id=f"{context.run_id}-{_SUFFIXES[index % len(_SUFFIXES)]}{index // len(_SUFFIXES) or ''}",
        previous_checkpoint_id=previous,
        timestamp=(_START + timedelta(minutes=index) if timestamp is None else timestamp).isoformat(),
        state={"step": index} if state is None else state,
        iteration_count=index,
        metadata={"superstep": index},
    )


async def _save_chain(
    storage: CheckpointStorage, context: CheckContext, count: int
) -> list[WorkflowCheckpoint]:
    """``count`` checkpoints, each naming the one before as its previous, saved oldest first."""
    saved: list[WorkflowCheckpoint] = []
    for index in range(count):
        previous = saved[-1].checkpoint_id if saved else None
        checkpoint = make_checkpoint(context, index, previous=previous)
        await storage.save(checkpoint)
        saved.append(checkpoint)
    return saved


def _ids(checkpoints: list[WorkflowCheckpoint]) -> list[str]:
    return [checkpoint.checkpoint_id for checkpoint in checkpoints]


def _require_same(expected: WorkflowCheckpoint, actual: WorkflowCheckpoint, what: str) -> None:
    difference = first_difference(expected.to_dict(), actual.to_dict())
    if difference is not None:
        raise CheckFailedError(f"{what} is not what was saved: {difference}")


async def _latest_id(storage: CheckpointStorage, workflow_name: str) -> str | None:
    latest = await storage.get_latest(workflow_name=workflow_name)
    return None if latest is None else latest.checkpoint_id


@check("protocol.methods", "protocol", "Has the protocol's six methods as coroutines, listings by keyword.")
async def methods(context: CheckContext) -> str | None:
    storage = await context.storage()
    problems: list[str] = []
    for name in PROTOCOL_METHODS:
        method = getattr(storage, name, None)
        if method is None:
            problems.append(f"{name} is missing")
        elif not inspect.iscoroutinefunction(method):
            problems.append(f"{name} is not an async method")
        elif name in _LISTING_METHODS:
            parameter = inspect.signature(method).parameters.get("workflow_name")
            if parameter is None or parameter.kind not in (
                inspect.Parameter.KEYWORD_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                problems.append(f"{name} takes no workflow_name keyword")
    if problems:
        raise CheckFailedError("; ".join(problems))
    return None


@check("save.returns_id", "protocol", "save returns the checkpoint's own id.")
async def save_returns_id(context: CheckContext) -> str | None:
    storage = await context.storage()
    checkpoint = make_checkpoint(context, 0)
    returned = await storage.save(checkpoint)
    if returned != checkpoint.checkpoint_id:
        raise CheckFailedError(f"save returned {returned!r} for checkpoint {checkpoint.checkpoint_id!r}")
    return None


@check("load.round_trip", "protocol", "load returns every field as saved, values and their types.")
async def load_round_trip(context: CheckContext) -> str | None:
    storage = await context.storage()
    state: dict[str, object] = {
        "text": "naïve café, 東京, emoji 🚀",
        "numbers": [0, -1, 2**53, 1.5, -0.25],
        "flags": {"yes": True, "no": False, "nothing": None},
        "nested": {"list": [[1, 2], {"deep": ["a", {"b": "c"}]}], "empty": {}, "none": []},
        "message": Message("assistant", ["a framework message in the state"]),
        "claim": Claim("C-42", 99.5),
    }
    checkpoint = make_checkpoint(context, 0, state=state)
    checkpoint.metadata = {"superstep": 0, "note": "metadata survives too"}
    await storage.save(checkpoint)
    _require_same(checkpoint, await storage.load(checkpoint.checkpoint_id), "the loaded checkpoint")
    return None


@check("load.copies", "protocol", "Changing a checkpoint after save, or after load, changes nothing stored.")
async def load_copies(context: CheckContext) -> str | None:
    storage = await context.storage()
    checkpoint = make_checkpoint(context, 0, state={"items": ["kept"]})
    expected = copy.deepcopy(checkpoint)
    await storage.save(checkpoint)
    checkpoint.state["items"].append("changed after save")
    first = await storage.load(checkpoint.checkpoint_id)
    _require_same(expected, first, "after the saved object was changed, the loaded checkpoint")
    first.state["items"].append("changed after load")
    _require_same(
        expected, await storage.load(checkpoint.checkpoint_id), "after a loaded copy was changed, a load"
    )
    return None


@check("load.missing", "protocol", "load of an unknown id raises WorkflowCheckpointException.")
async def load_missing(context: CheckContext) -> str | None:
    storage = await context.storage()
    try:
        loaded = await storage.load(f"{context.run_id}-never-saved")
    except WorkflowCheckpointException:
        return None
    except Exception as error:
        raise CheckFailedError(
            f"load raised {type(error).__name__} ({error}), not a WorkflowCheckpointException"
        ) from error
    raise CheckFailedError(f"load returned {loaded.checkpoint_id!r} for an id that was never saved")


@check(
    "list.ids_match_checkpoints",
    "protocol",
    "list_checkpoint_ids lists the ids of list_checkpoints, in the same order.",
)
async def ids_match(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 5)
    ids = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    listed = _ids(await storage.list_checkpoints(workflow_name=context.workflow_name))
    if ids != listed:
        raise CheckFailedError(f"list_checkpoint_ids gave {ids}, list_checkpoints {listed}")
    if sorted(ids) != sorted(_ids(saved)):
        raise CheckFailedError(f"saved {sorted(_ids(saved))}, listed {sorted(ids)}")
    return None


@check("list.save_order", "protocol", "Listings give a run's checkpoints oldest first, in the order saved.")
async def save_order(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = _ids(await _save_chain(storage, context, 8))
    listed = _ids(await storage.list_checkpoints(workflow_name=context.workflow_name))
    ids = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    for what, order in (("list_checkpoints", listed), ("list_checkpoint_ids", ids)):
        if order != saved:
            hint = " (sorted by id)" if order == sorted(saved) else ""
            raise CheckFailedError(f"{what} gave {_positions(saved, order)}{hint}; saved 0..{len(saved) - 1}")
    return None


def _positions(saved: list[str], listed: list[str]) -> str:
    """The listing as save positions ("[3, 0, 1]"), shorter to read than ids."""
    return "[" + ", ".join(str(saved.index(i)) if i in saved else repr(i) for i in listed) + "]"


@check(
    "list.workflow_isolation",
    "protocol",
    "Listing another workflow shows none of this one's checkpoints (an empty answer or a refusal).",
)
async def workflow_isolation(context: CheckContext) -> str | None:
    storage = await context.storage()
    await _save_chain(storage, context, 2)
    other = f"{context.workflow_name}-other"
    notes: list[str] = []
    for name in _LISTING_METHODS:
        try:
            answer: object = await getattr(storage, name)(workflow_name=other)
        except WorkflowCheckpointException as refusal:
            notes.append(f"{name} refused ({type(refusal).__name__})")
            continue
        if answer not in ([], None):
            raise CheckFailedError(f"{name}(workflow_name={other!r}) returned {answer!r}")
    return "; ".join(notes) or None


@check("get_latest.empty", "protocol", "get_latest returns None before anything is saved.")
async def latest_empty(context: CheckContext) -> str | None:
    storage = await context.storage()
    latest = await storage.get_latest(workflow_name=context.workflow_name)
    if latest is not None:
        raise CheckFailedError(f"get_latest returned {latest.checkpoint_id!r} from an empty run")
    return None


@check("get_latest.newest", "protocol", "get_latest returns the last checkpoint saved, with every field.")
async def latest_newest(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 6)
    latest = await storage.get_latest(workflow_name=context.workflow_name)
    if latest is None:
        raise CheckFailedError("get_latest returned None after six saves")
    if latest.checkpoint_id != saved[-1].checkpoint_id:
        position = _ids(saved).index(latest.checkpoint_id) if latest.checkpoint_id in _ids(saved) else "?"
        raise CheckFailedError(
            f"get_latest returned the checkpoint saved at position {position}, not the newest (5)"
        )
    _require_same(saved[-1], latest, "get_latest's checkpoint")
    return None


@check(
    "get_latest.shared_timestamp",
    "protocol",
    "Of two checkpoints with one timestamp, get_latest returns the one whose previous is the other.",
)
async def latest_shared_timestamp(context: CheckContext) -> str | None:
    # A run that pauses and is answered saves two checkpoints at one superstep boundary, and a
    # coarse clock can give both the same timestamp; the resume must still find the second.
    storage = await context.storage()
    moment = _START + timedelta(hours=1)
    first = make_checkpoint(context, 0, timestamp=moment)
    second = make_checkpoint(context, 1, timestamp=moment, previous=first.checkpoint_id)
    await storage.save(first)
    await storage.save(second)
    latest = await _latest_id(storage, context.workflow_name)
    if latest != second.checkpoint_id:
        which = "the earlier (its parent)" if latest == first.checkpoint_id else repr(latest)
        raise CheckFailedError(f"get_latest returned {which}, not the checkpoint saved after it")
    return None


@check("lineage.chain", "protocol", "previous_checkpoint_id links every checkpoint back to the first.")
async def lineage_chain(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 5)
    latest = await storage.get_latest(workflow_name=context.workflow_name)
    if latest is None:
        raise CheckFailedError("get_latest returned None after five saves")
    walked = [latest]
    while (parent := walked[-1].previous_checkpoint_id) is not None and len(walked) <= len(saved):
        walked.append(await storage.load(parent))
    walked.reverse()
    if _ids(walked) != _ids(saved):
        raise CheckFailedError(f"walking back from get_latest gave {_ids(walked)}, saved {_ids(saved)}")
    return None


@check(
    "save.idempotent",
    "protocol",
    "Saving a checkpoint again returns its id and leaves one copy, its place and the latest unchanged.",
)
async def save_idempotent(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 3)
    before = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    again = copy.deepcopy(saved[0])
    returned = await storage.save(again)
    if returned != again.checkpoint_id:
        raise CheckFailedError(f"the second save returned {returned!r}, not {again.checkpoint_id!r}")
    ids = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    if ids.count(again.checkpoint_id) != 1:
        raise CheckFailedError(
            f"after saving it twice, {again.checkpoint_id!r} is listed {ids.count(again.checkpoint_id)} times"
        )
    if ids != before:
        # Compared with the listing before, not with the save order, which list.save_order checks.
        raise CheckFailedError(
            f"saving the first checkpoint again changed the listing from {_positions(_ids(saved), before)} "
            f"to {_positions(_ids(saved), ids)} (as save positions)"
        )
    latest = await _latest_id(storage, context.workflow_name)
    if latest != saved[-1].checkpoint_id:
        raise CheckFailedError(f"saving the first checkpoint again made get_latest return {latest!r}")
    _require_same(saved[0], await storage.load(again.checkpoint_id), "the checkpoint saved twice")
    return None


@check("delete.existing", "protocol", "delete returns True, and the checkpoint no longer loads or lists.")
async def delete_existing(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 3)
    middle = saved[1].checkpoint_id
    if await storage.delete(middle) is not True:
        raise CheckFailedError("delete of a saved checkpoint did not return True")
    try:
        await storage.load(middle)
    except WorkflowCheckpointException:
        pass
    else:
        raise CheckFailedError("the deleted checkpoint still loads")
    ids = await storage.list_checkpoint_ids(workflow_name=context.workflow_name)
    listed = _ids(await storage.list_checkpoints(workflow_name=context.workflow_name))
    # Compared as sets: the order is list.save_order's to check.
    expected = sorted([saved[0].checkpoint_id, saved[2].checkpoint_id])
    for what, listing in (("list_checkpoint_ids", ids), ("list_checkpoints", listed)):
        if sorted(listing) != expected:
            raise CheckFailedError(
                f"after deleting the checkpoint saved at position 1, {what} gives save positions "
                f"{_positions(_ids(saved), listing)}, not 0 and 2"
            )
    return None


@check("delete.missing", "protocol", "delete of an unknown or already deleted id returns False.")
async def delete_missing(context: CheckContext) -> str | None:
    storage = await context.storage()
    if await storage.delete(f"{context.run_id}-never-saved") is not False:
        raise CheckFailedError("delete of an id never saved did not return False")
    checkpoint = make_checkpoint(context, 0)
    await storage.save(checkpoint)
    await storage.delete(checkpoint.checkpoint_id)
    if await storage.delete(checkpoint.checkpoint_id) is not False:
        raise CheckFailedError("a second delete of the same id did not return False")
    return None


@check("delete.latest", "protocol", "Deleting the newest checkpoint makes the one before it the latest.")
async def delete_latest(context: CheckContext) -> str | None:
    storage = await context.storage()
    saved = await _save_chain(storage, context, 3)
    await storage.delete(saved[-1].checkpoint_id)
    latest = await _latest_id(storage, context.workflow_name)
    if latest != saved[1].checkpoint_id:
        raise CheckFailedError(
            f"after deleting the newest, get_latest returned {latest!r}, not {saved[1].checkpoint_id!r}"
        )
    for checkpoint in saved[:2]:
        await storage.delete(checkpoint.checkpoint_id)
    if (latest := await _latest_id(storage, context.workflow_name)) is not None:
        raise CheckFailedError(f"after deleting every checkpoint, get_latest returned {latest!r}")
    return None
