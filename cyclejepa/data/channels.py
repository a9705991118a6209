"""Channel names as releases write them: one rule for choosing channels by name.

A channel name is compared by its key (`channel_key`): case-folded, surrounding white space and
trailing punctuation removed, so that ``PLETH``, ``pleth`` and ``PLETH,`` (the trailing comma of
PhysioNet's MIMIC-derived releases, e.g. BIDMC) are one channel. A name whose key is empty
(``","``) names nothing. Every place that picks a channel by name (the ``wfdb`` folder's
``channels``, a phase provider's ``lead``, ``cyclejepa phase --lead``) goes through
`match_channels`, which refuses a wanted name that matches two channels of a record, naming both.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

__all__ = ["ChannelError", "channel_key", "match_channels"]

_TRAILING = string.punctuation + string.whitespace


class ChannelError(KeyError):
    """A wanted channel name that a record lacks, or that matches two of its channels.

    A `KeyError` (the exception callers of a channel lookup catch) whose text is the message
    itself, not its quoted form."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def channel_key(name: str) -> str:
    """The form two channel names are compared in: case-folded, surrounding white space and
    trailing punctuation stripped.

    >>> channel_key(" PLETH, "), channel_key("II,"), channel_key("mod.V1"), channel_key("V1-V2")
    ('pleth', 'ii', 'mod.v1', 'v1-v2')
    """
    return str(name).casefold().strip().rstrip(_TRAILING)


def match_channels(wanted: str | Sequence[str], available: Sequence[str]) -> list[int]:
    """Indices in ``available`` of the ``wanted`` channel name(s), in the order wanted, matched by
    `channel_key`.

    Raises
    ------
    ChannelError
        Wanted names that no channel matches (listing them and the available channels), or one
        that two channels match (naming both).
    ValueError
        A wanted name with an empty key, or two wanted names with the same key.

    >>> match_channels(["PLETH", "ii"], ["PLETH,", "RESP,", "II,"])
    [0, 2]
    """
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    keys = [channel_key(name) for name in wanted]
    empty = [name for name, key in zip(wanted, keys, strict=True) if not key]
    if empty:
        raise ValueError(f"channel name(s) {empty} name no channel (nothing left once case, spaces and punctuation go)")
    repeated = sorted({name for name, key in zip(wanted, keys, strict=True) if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"channel names {repeated} name the same channel (case, spaces and trailing punctuation aside)")
    have = [channel_key(name) for name in available]
    found = [[row for row, other in enumerate(have) if other == key] for key in keys]
    missing = [name for name, rows in zip(wanted, found, strict=True) if not rows]
    if missing:
        raise ChannelError(f"no channel {missing} (the record has {list(available)})")
    for name, rows in zip(wanted, found, strict=True):
        if len(rows) > 1:
            both = [available[row] for row in rows]
            raise ChannelError(f"channel {name!r} matches {len(rows)} channels, {both}: rename one of them")
    return [rows[0] for rows in found]
