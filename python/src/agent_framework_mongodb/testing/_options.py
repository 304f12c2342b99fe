"""Codec options, read preference, write concern and read concern, inherited as pymongo inherits them.

pymongo's client, database and collection objects each carry these four settings; a database
takes the client's for any it is not given, a collection its database's, and ``with_options``
makes a new object that takes the old one's (``pymongo.common.BaseObject`` and
``AsyncCollection.with_options``). The engine keeps them in one frozen value per object so that a
storage can read them back and the engine can act on the write concern's ``acknowledged``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from bson.codec_options import CodecOptions
from pymongo import common
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import (
    Nearest,
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    make_read_preference,
    read_pref_mode_from_name,
)
from pymongo.write_concern import WriteConcern

ReadPreferenceMode: TypeAlias = Primary | PrimaryPreferred | Secondary | SecondaryPreferred | Nearest
"""The five read preference classes (pymongo's common base class is private)."""

_MODES = (Primary, PrimaryPreferred, Secondary, SecondaryPreferred, Nearest)

# The client keyword options the engine models, lower-cased as pymongo matches them.
_MODELLED = frozenset(
    {"w", "wtimeoutms", "journal", "readpreference", "readpreferencetags", "maxstalenessseconds"}
    | {"read_preference", "readconcernlevel", "timeoutms", "retrywrites"}
)


@dataclass(frozen=True)
class Settings:
    """The four settings of one client, database or collection object."""

    codec_options: CodecOptions[Any]
    read_preference: ReadPreferenceMode
    write_concern: WriteConcern
    read_concern: ReadConcern

    def derive(
        self,
        codec_options: object = None,
        read_preference: object = None,
        write_concern: object = None,
        read_concern: object = None,
    ) -> Settings:
        """These settings with each given one replacing its counterpart, validated as pymongo does."""
        return Settings(
            self.codec_options if codec_options is None else _codec_options(codec_options),
            self.read_preference if read_preference is None else _read_preference(read_preference),
            self.write_concern if write_concern is None else _write_concern(write_concern),
            self.read_concern if read_concern is None else _read_concern(read_concern),
        )


class SettingsCarrier:
    """The four settings as properties, for the client, database and collection objects.

    A collection's read preference and read concern are kept and reported; reads ignore both, as
    there is one node and every read sees the latest write (DIVERGENCES.md).
    """

    _settings: Settings

    @property
    def settings(self) -> Settings:
        """This object's codec options, read preference, write concern and read concern."""
        return self._settings

    @property
    def codec_options(self) -> CodecOptions[Any]:
        return self._settings.codec_options

    @property
    def read_preference(self) -> ReadPreferenceMode:
        return self._settings.read_preference

    @property
    def write_concern(self) -> WriteConcern:
        return self._settings.write_concern

    @property
    def read_concern(self) -> ReadConcern:
        return self._settings.read_concern


@dataclass(frozen=True)
class ClientSettings:
    """What an ``InMemoryMongoClient``'s keyword options configure."""

    settings: Settings
    timeout: float | None
    """``timeoutMS`` in seconds, as pymongo's ``client.options.timeout``; None when not given."""
    retry_writes: bool = True
    """``retryWrites``, true by default as in pymongo (``client.options.retry_writes``)."""


def client_settings(codec_options: CodecOptions[Any], options: Mapping[str, Any]) -> ClientSettings:
    """Parse the keyword options pymongo's client accepts for these settings.

    Keys match case-insensitively and values go through pymongo's own validators
    (``pymongo.common.validate``), so a bad value raises what ``AsyncMongoClient`` raises. The
    defaults are ``AsyncMongoClient``'s: ``Primary()``, ``WriteConcern()``, ``ReadConcern()``.
    Options the engine does not model (``host``, ``serverSelectionTimeoutMS`` ...) are ignored.
    """
    given = {
        key.lower(): common.validate(key, value)[1]
        for key, value in options.items()
        if key.lower() in _MODELLED
    }
    if "read_preference" in given:
        read_preference = _read_preference(given["read_preference"])
    else:
        mode = read_pref_mode_from_name(given.get("readpreference", "primary"))
        built = make_read_preference(
            mode, given.get("readpreferencetags"), given.get("maxstalenessseconds", -1)
        )
        read_preference = _read_preference(built)
    settings = Settings(
        codec_options,
        read_preference,
        WriteConcern(given.get("w"), given.get("wtimeoutms"), given.get("journal")),
        ReadConcern(given.get("readconcernlevel")),
    )
    return ClientSettings(settings, given.get("timeoutms"), bool(given.get("retrywrites", True)))


def _codec_options(value: object) -> CodecOptions[Any]:
    if not isinstance(value, CodecOptions):
        raise TypeError("codec_options must be an instance of bson.codec_options.CodecOptions")
    return value  # pyright: ignore[reportUnknownVariableType] - isinstance cannot name the document type


def _read_preference(value: object) -> ReadPreferenceMode:
    if not isinstance(value, _MODES):
        raise TypeError(
            f"{value!r} is not valid for read_preference. See pymongo.read_preferences for valid options."
        )
    return value


def _write_concern(value: object) -> WriteConcern:
    if not isinstance(value, WriteConcern):
        raise TypeError(
            f"write_concern must be an instance of pymongo.write_concern.WriteConcern, not {type(value)}"
        )
    return value


def _read_concern(value: object) -> ReadConcern:
    if not isinstance(value, ReadConcern):
        raise TypeError(
            f"read_concern must be an instance of pymongo.read_concern.ReadConcern, not {type(value)}"
        )
    return value
