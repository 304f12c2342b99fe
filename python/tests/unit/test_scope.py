"""RunScope: discriminators and ids are deterministic, and distinct for distinct scopes."""

from __future__ import annotations

import itertools
from typing import Any

from agent_framework_mongodb import MongoDBCheckpointStorageOptions
from agent_framework_mongodb.checkpoints.scope import RunScope


def scope(**fields: Any) -> RunScope:
    base: dict[str, Any] = {"tenant_id": "t", "workflow_name": "w", "session_id": "s"}
    return RunScope.from_options(MongoDBCheckpointStorageOptions(**{**base, **fields}))


def test_deterministic_sha256_hex() -> None:
    first, second = scope(), scope()
    assert first.discriminator == second.discriminator
    assert len(first.discriminator) == 64
    int(first.discriminator, 16)
    assert first.checkpoint_document_id("cp-1") == second.checkpoint_document_id("cp-1")
    assert first.counter_document_id == second.counter_document_id


def test_known_vectors_pin_the_derivation() -> None:
    # Changing the derivation would orphan every stored document: these values must never move.
    # Input of the discriminator: tag, then per field 0x01 + 8-byte big-endian length + UTF-8,
    # or a single 0x00 for application_id=None.
    s = scope()
    assert s.discriminator == "6d1aeba5c70eea1b2bc7778c699f0710f05c7eea41ce1bcc17140d9a32c7aaec"
    assert (
        s.checkpoint_document_id("cp-1") == "28fff322542c3080cf0e117b8b3b63bc34119f57c1dbeebf0d20644cb77ca038"
    )
    assert s.counter_document_id == "f1e1e83463e5e9244f68334f5dcfe2e073f2f883cf6c4300841a82688ed00c41"


def test_field_boundaries_cannot_be_shifted() -> None:
    # Naive concatenation would make ("ab", "c") and ("a", "bc") collide.
    assert (
        scope(tenant_id="ab", workflow_name="c").discriminator
        != scope(tenant_id="a", workflow_name="bc").discriminator
    )


def test_every_field_changes_the_discriminator() -> None:
    variants = [
        scope(),
        scope(tenant_id="t2"),
        scope(workflow_name="w2"),
        scope(session_id="s2"),
        scope(application_id="a"),
        scope(application_id="None"),
    ]
    discriminators = {v.discriminator for v in variants}
    assert len(discriminators) == len(variants)


def test_ids_differ_across_scopes_and_kinds() -> None:
    scopes = [scope(), scope(session_id="s2")]
    ids = [s.checkpoint_document_id("cp") for s in scopes] + [s.counter_document_id for s in scopes]
    assert len(set(ids)) == len(ids)
    for a, b in itertools.combinations(["cp", "cp2", "", "x"], 2):
        assert scopes[0].checkpoint_document_id(a) != scopes[0].checkpoint_document_id(b)


def test_fields_carry_discriminator_and_raw_scope() -> None:
    s = scope(application_id="app")
    assert s.fields() == {
        "scope_discriminator": s.discriminator,
        "tenant_id": "t",
        "application_id": "app",
        "workflow_name": "w",
        "session_id": "s",
    }
