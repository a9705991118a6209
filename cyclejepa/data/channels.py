"""Channel names as releases write them: one rule (`match_channels`) for choosing channels by
name, compared by `channel_key`, so ``PLETH``, ``pleth`` and ``PLETH,`` (BIDMC's trailing
comma) are one channel."""

from __future__ import annotations

import string
from collections.abc import Sequence

__all__ = ["ChannelError", "channel_key", "match_channels"]

_TRAILING = string.punctuation + string.whitespace


class ChannelError(KeyError):
    """A wanted channel name a record lacks or matches twice (a `KeyError`, its message unquoted)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def channel_key(name: str) -> str:
    """Case-folded, white space and trailing punctuation stripped.

    >>> channel_key(" PLETH, "), channel_key("II,"), channel_key("mod.V1"), channel_key("V1-V2")
    ('pleth', 'ii', 'mod.v1', 'v1-v2')
    """
    return str(name).casefold().strip().rstrip(_TRAILING)


def match_channels(wanted: str | Sequence[str], available: Sequence[str]) -> list[int]:
    """Indices in ``available`` of the ``wanted`` name(s), in order, matched by `channel_key`;
    `ChannelError` for a name no channel or two channels match, ValueError for an empty key or
    two wanted names with one key.

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
