"""A wire-protocol front for the in-process engine: ``WireProtocolServer``.

Modules, one concern each: ``_messages`` (framing), ``_crc32c`` (OP_MSG checksums),
``_connections`` (listener, connections, misbehaviour), ``_execution`` (a command's path from
arrival to reply), ``_handshake`` (hello), ``_members`` (replica-set state), ``_commands`` (the
command table), ``_admin``/``_reads``/``_writes``/``_namespaces`` (the commands), ``_cursors``
(server-side cursors), ``_replies`` (errors as replies), ``_retryable`` (txnNumber records),
``_fail_points`` (failCommand), ``_replication`` (write concern, paused replication), ``_server``
(the public class). Divergences from a real server: ``../DIVERGENCES.md``, "Wire-protocol front".
"""

from ._execution import CommandRecord
from ._server import WireProtocolServer

__all__ = ["CommandRecord", "WireProtocolServer"]
