"""Collations: what the engine simulates, and collation documents as the server stores them.

The engine compares strings binary only, which is the ``simple`` collation; any other locale in a
query raises ``NotImplementedError`` rather than being silently compared binary. Index and
collection-default collations are only stored and listed, so the engine expands them the way the
server reports them: the server builds an ICU collator from the given fields and stores the
collator's full specification, every field filled in (jstests/core/collation.js lists
``{locale: "fr_CA"}`` back as ``{locale: "fr_CA", caseLevel: false, caseFirst: "off", strength: 3,
numericOrdering: false, alternate: "non-ignorable", maxVariable: "punct", normalization: false,
backwards: true, version: "57.1"}`` and ``en_US`` the same with ``backwards: false``). The simple
collation is not stored at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.collation import Collation

from ._codec import as_mapping, wire_value

# ICU's defaults, in the order the server lists the fields.
_DEFAULTS: dict[str, Any] = {
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 3,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}
# Locales whose ICU tailoring changes a default; only the one the jstests pin is known here.
_LOCALE_DEFAULTS: dict[str, dict[str, Any]] = {"fr_CA": {"backwards": True}}


def collation_document(collation: Collation | Mapping[str, Any]) -> Mapping[str, Any]:
    """A collation as the document pymongo sends; TypeError for anything else, as pymongo raises."""
    given: object = collation
    spec = collation.document if isinstance(collation, Collation) else as_mapping(given)
    if spec is None:
        raise TypeError("collation must be a dict or an instance of pymongo.collation.Collation")
    return spec


def check_collation(collation: Collation | Mapping[str, Any] | None) -> None:
    """Accept a collation wherever pymongo does; only the binary ``simple`` locale is simulated."""
    if collation is None:
        return
    spec = collation_document(collation)
    if spec.get("locale") != "simple":
        raise NotImplementedError(
            "InMemoryMongoClient only simulates the 'simple' collation (binary comparison); "
            f"got {dict(spec)!r}. See agent_framework_mongodb/testing/DIVERGENCES.md."
        )


def expand_collation(collation: Collation | Mapping[str, Any]) -> dict[str, Any] | None:
    """The collation as the server stores and lists it; None for the simple collation.

    Given fields win over the defaults; fields are listed in the server's order. The locale is not
    checked against ICU's list, and locale-specific defaults are known for ``fr_CA`` only
    (DIVERGENCES.md).
    """
    spec = dict(collation_document(collation))
    locale = spec.get("locale")
    if locale == "simple":
        return None
    if not isinstance(locale, str):
        raise NotImplementedError(f"a collation needs a locale; got {spec!r} (DIVERGENCES.md)")
    expanded: dict[str, Any] = {"locale": locale, **_DEFAULTS, **_LOCALE_DEFAULTS.get(locale, {})}
    expanded.update((field, value) for field, value in spec.items() if field != "locale")
    return dict(wire_value(expanded))
