"""Namespace commands: collections (``create``, ``drop``, ``listCollections``), databases
(``dropDatabase``, ``listDatabases``) and indexes (``createIndexes``, ``listIndexes``, ``dropIndexes``).

Reply shapes from https://www.mongodb.com/docs/manual/reference/command/ (each command's "Output").
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

from bson.binary import Binary, UuidRepresentation
from pymongo import IndexModel

from .._indexes import matches
from ._invocation import Invocation
from ._replies import CommandError

_NAMESPACE_NOT_FOUND = 26
_ID_INDEX = {"v": 2, "key": {"_id": 1}, "name": "_id_"}


def _namespace_missing(namespace: str) -> CommandError:
    return CommandError(_NAMESPACE_NOT_FOUND, f"ns does not exist: {namespace}")


def _collection_uuid(namespace: str) -> Binary:
    """A stable UUID per namespace: the server gives each collection one (listCollections' ``info.uuid``)."""
    return Binary.from_uuid(
        uuid.uuid5(uuid.NAMESPACE_URL, f"mongodb:{namespace}"), UuidRepresentation.STANDARD
    )


async def create(invocation: Invocation) -> dict[str, Any]:
    options = {
        key: value
        for key, value in invocation.command.items()
        if key
        not in (
            "create",
            "collation",
            "$db",
            "lsid",
            "$clusterTime",
            "writeConcern",
            "maxTimeMS",
            "comment",
            "$readPreference",
            "txnNumber",
        )
    }
    await invocation.engine[invocation.database].create_collection(
        invocation.target, check_exists=False, collation=invocation.document("collation"), **options
    )
    return {"ok": 1.0}


async def drop(invocation: Invocation) -> dict[str, Any]:
    # Since 7.0 dropping a collection that does not exist succeeds
    # (https://www.mongodb.com/docs/manual/reference/command/drop/#behavior).
    collection = invocation.collection()
    indexes = len(collection.index_specs())
    await collection.drop()
    return {"nIndexesWas": indexes, "ns": invocation.namespace, "ok": 1.0}


async def drop_database(invocation: Invocation) -> dict[str, Any]:
    database = invocation.engine[invocation.database]
    for name in database.existing_collection_names():
        await database.drop_collection(name)
    return {"ok": 1.0}


def _listing(invocation: Invocation, name: str) -> dict[str, Any]:
    state = invocation.engine.collection_state(invocation.database, name)
    options: dict[str, Any] = {}
    if state.catalog.default_collation is not None:
        options["collation"] = state.catalog.default_collation
    return {
        "name": name,
        "type": "collection",
        "options": options,
        "info": {"readOnly": False, "uuid": _collection_uuid(f"{invocation.database}.{name}")},
        "idIndex": dict(_ID_INDEX),
    }


async def list_collections(invocation: Invocation) -> dict[str, Any]:
    filter_ = invocation.document("filter") or {}
    name_only = bool(invocation.option("nameOnly"))
    entries: list[dict[str, Any]] = []
    for name in invocation.engine[invocation.database].existing_collection_names():
        entry = _listing(invocation, name)
        if filter_ and not matches(filter_, entry):
            continue
        entries.append({"name": name, "type": "collection"} if name_only else entry)
    cursor_options = invocation.document("cursor") or {}
    first = invocation.cursors.first_batch(
        f"{invocation.database}.$cmd.listCollections",
        entries,
        batch_size=invocation.batch_size(cursor_options),
    )
    return {"cursor": first, "ok": 1.0}


async def list_databases(invocation: Invocation) -> dict[str, Any]:
    names = await invocation.engine.list_database_names()
    name_only = bool(invocation.option("nameOnly"))
    databases: list[dict[str, Any]] = [
        {"name": name} if name_only else {"name": name, "sizeOnDisk": 0, "empty": False} for name in names
    ]
    filter_ = invocation.document("filter")
    if filter_:
        databases = [entry for entry in databases if matches(filter_, entry)]
    reply: dict[str, Any] = {"databases": databases}
    if not name_only:
        reply.update(totalSize=0, totalSizeMb=0)
    reply["ok"] = 1.0
    return reply


async def create_indexes(invocation: Invocation) -> dict[str, Any]:
    given = invocation.option("indexes")
    if not isinstance(given, list) or not given:
        raise CommandError(2, "Must specify at least one index to create")
    models: list[IndexModel] = []
    for spec in cast("list[Any]", given):  # type: ignore[redundant-cast]
        if not isinstance(spec, Mapping) or not isinstance(spec.get("key"), Mapping):  # pyright: ignore[reportUnknownMemberType]
            raise CommandError(9, "The 'key' field is a required property of an index specification")
        fields = dict(cast("Mapping[str, Any]", spec))
        keys = list(fields.pop("key").items())
        fields.pop("v", None)
        models.append(IndexModel(keys, **fields))
    collection = invocation.collection()
    existed = invocation.exists()
    before = len(collection.index_specs()) if existed else 1
    options: dict[str, Any] = {}
    if "maxTimeMS" in invocation.command:
        options["maxTimeMS"] = invocation.option("maxTimeMS")
    await collection.create_indexes(models, **options)
    after = len(collection.index_specs())
    reply: dict[str, Any] = {
        "numIndexesBefore": before,
        "numIndexesAfter": after,
        "createdCollectionAutomatically": not existed,
    }
    if after == before:
        reply["note"] = "all indexes already exist"
    reply["ok"] = 1.0
    return reply


async def list_indexes(invocation: Invocation) -> dict[str, Any]:
    if not invocation.exists():
        raise _namespace_missing(invocation.namespace)
    listing = await (await invocation.collection().list_indexes()).to_list()
    cursor_options = invocation.document("cursor") or {}
    first = invocation.cursors.first_batch(
        invocation.namespace, listing, batch_size=invocation.batch_size(cursor_options)
    )
    return {"cursor": first, "ok": 1.0}


async def drop_indexes(invocation: Invocation) -> dict[str, Any]:
    if not invocation.exists():
        raise _namespace_missing(invocation.namespace)
    collection = invocation.collection()
    count = len(collection.index_specs())
    index = invocation.option("index")
    if index == "*":
        await collection.drop_indexes()
    elif isinstance(index, str):
        await collection.drop_index(index)
    elif isinstance(index, Mapping):
        await collection.drop_index(list(cast("Mapping[str, Any]", index).items()))
    elif isinstance(index, list):
        for name in cast("list[Any]", index):  # type: ignore[redundant-cast]
            await collection.drop_index(str(name))
    else:
        raise CommandError(14, "BSON field 'dropIndexes.index' must be a string, an object or an array")
    return {"nIndexesWas": count, "ok": 1.0}
