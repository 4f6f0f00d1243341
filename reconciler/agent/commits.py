"""One environment's view of the git branch it plans (``--git``): fetches, their errors,
and whether a commit is still the head.

:class:`Commits` runs one fetch at a time (a fetch the heal stopped waiting for goes on in
its thread, and a second one never writes into the same clone meanwhile), keeps the last
fetch's error and since when fetches fail (``/status``'s ``git``), and logs each new commit.
Without ``--git`` the source has no commit and nothing is fetched.
"""

from __future__ import annotations

import asyncio
import time

from reconciler.agent.logs import Log
from reconciler.agent.source import Source
from reconciler.errors import ReconcileError
from reconciler.jetstream.transport import settled
from reconciler.model.timestamps import rfc3339

#: A heal looks at the branch head under the apply lock for at most this long (seconds):
#: past it, it goes on with the last commit fetched (a git server that stops answering
#: never keeps the lock).
HEAD_CHECK_SECONDS = 10.0


class Commits:
    def __init__(self, source: Source, log: Log) -> None:
        self.source = source
        self.log = log
        self.error: tuple[str, float] | None = None  # the last fetch's error, since when
        self._fetch: asyncio.Future[bool] | None = None  # the fetch under way (one at once)

    @property
    def following(self) -> bool:
        """A git branch (a commit was fetched): poll it for new commits."""
        return self.source.commit is not None

    def refreshing(self) -> asyncio.Future[bool]:
        """The fetch under way, or a new one: never two at once into the same clone (a
        fetch the heal stopped waiting for goes on in its thread)."""
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.ensure_future(self._refresh())
            self._fetch.add_done_callback(settled)  # a heal may stop waiting for it
        return self._fetch

    async def _refresh(self) -> bool:
        """Look for a new commit; a fetch that fails keeps the last one (and is logged)."""
        try:
            new = await self.source.refresh()
        except ReconcileError as err:
            if self.source.commit is None:
                raise
            self.log.event("error", str(err), commit=self.source.commit)
            self.error = (str(err), self.error[1] if self.error else time.time())
            return False
        self.error = None
        if new:
            self.log.event("commit", "new commit to plan", commit=self.source.commit)
        return new

    async def still_head(self, commit: str | None) -> bool:
        """Under the apply lock: whether ``commit`` is still the branch head (the branch is
        fetched now; a heal never applies a commit older than a pushed one)."""
        if commit is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.refreshing()), HEAD_CHECK_SECONDS)
            except TimeoutError:
                self.log.event(
                    "error",
                    f"the branch head did not answer within {HEAD_CHECK_SECONDS:g}s: "
                    "healing the last commit fetched",
                    commit=commit,
                )
        return self.source.commit == commit

    def to_json(self) -> dict[str, str | None]:
        return {
            "error": self.error[0] if self.error else None,
            "failing_since": rfc3339(self.error[1]) if self.error else None,
        }
