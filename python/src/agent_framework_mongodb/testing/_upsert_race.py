"""When the server retries an upsert that lost the race to insert, rather than report E11000.

Two upserts whose queries both find nothing both insert; a unique index then rejects the second
with a duplicate key (E11000). Since MongoDB 4.2 the server retries such an upsert itself, as an
update of the document the winner inserted, when its query is only equality predicates (``$and``
of them included) on exactly the colliding index's fields; otherwise the caller gets the error
(the manual's "Upsert with Duplicate Values":
https://www.mongodb.com/docs/manual/reference/method/db.collection.updateOne/#upsert-with-duplicate-values;
SERVER-37124). The manual's last condition, that the update does not modify a queried field, is
not checked here: for an update pipeline it cannot be decided without running it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bson.regex import Regex

from ._codec import as_list, as_mapping


def server_retries(filter_: Mapping[str, Any], key_pattern: Mapping[str, Any]) -> bool:
    """Whether the server retries an upsert with this filter that collided on ``key_pattern``."""
    fields = _equality_fields(filter_)
    return fields is not None and fields == set(key_pattern)


def _equality_fields(filter_: Mapping[str, Any]) -> set[str] | None:
    """The fields of a filter made only of equality predicates; None when it has any other."""
    fields: set[str] = set()
    for name, condition in filter_.items():
        if name == "$and":
            for clause in as_list(condition) or []:
                inner = _equality_fields(as_mapping(clause) or {})
                if inner is None:
                    return None
                fields |= inner
        elif name.startswith("$") or isinstance(condition, (Regex, re.Pattern)):
            return None
        else:
            operators = as_mapping(condition) or {}
            if any(key.startswith("$") for key in operators) and set(operators) != {"$eq"}:
                return None
            fields.add(name)
    return fields
