"""Replica-set state: which member is primary, the election term, the set's configuration version.

What a member says of the set in ``hello`` follows the server's replica-set fields
(https://www.mongodb.com/docs/manual/reference/command/hello/#replica-sets): every member lists
``hosts``, ``setName`` and ``setVersion``; the primary reports ``isWritablePrimary: true`` and an
``electionId``, the others ``secondary: true``, and each names the ``primary`` it knows. A
primary's ``electionId`` is an ObjectId whose first four bytes are 0x7fffffff and whose last eight
are the election term (``OID::fromTerm`` in src/mongo/bson/oid.h), so a new election's id is
greater: drivers ignore a primary whose (electionId, setVersion) is older than one they have
seen (mongodb/specifications source/server-discovery-and-monitoring/server-discovery-and-monitoring.md,
"electionId and setVersion").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bson.objectid import ObjectId


def election_id(term: int) -> ObjectId:
    return ObjectId(b"\x7f\xff\xff\xff" + term.to_bytes(8, "big"))


@dataclass
class ReplicaSetState:
    name: str
    addresses: list[str] = field(default_factory=list[str])
    primary: int | None = 0
    term: int = 1
    set_version: int = 1

    @property
    def election_id(self) -> ObjectId:
        return election_id(self.term)

    @property
    def primary_address(self) -> str | None:
        return None if self.primary is None else self.addresses[self.primary]

    def is_primary(self, member: int) -> bool:
        return self.primary == member

    def step_down(self) -> None:
        self.primary = None

    def elect(self, member: int) -> None:
        if not 0 <= member < len(self.addresses):
            raise ValueError(f"no member {member} in a set of {len(self.addresses)}")
        self.term += 1
        self.primary = member
