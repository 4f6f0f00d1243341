"""A spec cache entry taken apart and put together again, as an attacker who can write
the cache folder does it: the header, the tables and the specs (each a JSON array, in
``reconciler.specs.cache``'s order), sealed again under a key of their choosing."""

from __future__ import annotations

import hmac
import json
from pathlib import Path
from typing import Any

from reconciler.specs.cache import LINE_SPECS, seal

#: The places in a cached spec's array (``cache._spec_json``).
KIND, NAME, CONFIG, VALUE_FILE, FILE, LINE, STREAM = range(7)
LOCATIONS, WRITTEN = 8, 9


class Entry:
    """One entry's header, tables and specs, read from ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        head, tables, *lines = path.read_bytes().split(b"\n")
        self.header: dict[str, Any] = json.loads(head)
        self.tables: dict[str, Any] = json.loads(tables)
        self.specs: list[list[Any]] = [spec for line in lines for spec in json.loads(line)]

    def spec(self, name: str) -> list[Any]:
        [found] = [spec for spec in self.specs if spec[NAME] == name]
        return found

    def body(self) -> bytes:
        self.tables["specs"] = len(self.specs)
        lines = [json.dumps(self.tables)]
        lines += (
            json.dumps(self.specs[at : at + LINE_SPECS])
            for at in range(0, len(self.specs), LINE_SPECS)
        )
        return "\n".join(lines).encode()

    def write(self, key: bytes | None = None, *, mac: str | None = None) -> None:
        """The entry written back, sealed under ``key`` (else with ``mac`` as given, else
        the MAC it had)."""
        body = self.body()
        if key is not None:
            mac = seal(key, self.header["key"], body)
        header = {**self.header, "mac": self.header["mac"] if mac is None else mac}
        self.path.write_bytes(json.dumps(header).encode() + b"\n" + body)

    def guessed_mac(self, guess: bytes) -> str:
        """A MAC under a key the attacker guessed (not the entry's)."""
        return hmac.new(guess, self.body(), "sha256").hexdigest()
