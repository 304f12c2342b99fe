"""Importing this module is itself the side effect a hostile payload would cause."""

from __future__ import annotations

from tests.unit.codec import marker

marker.trip("marker_import imported")
