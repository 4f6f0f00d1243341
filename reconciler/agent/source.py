"""Where the agent's specs come from: the paths as given, or a git branch's head commit.

:class:`FixedSource` plans the request the command line built, every cycle, made again
when the project file it was made from changes (an invalid edit keeps the last one).
:class:`GitSource` (``--git URL --ref BRANCH``) fetches the branch with dulwich (pure
Python: no ``git`` binary needed) into a bare repository in a cache folder, and writes
the head commit's tree into ``trees/<commit>/`` there (regular files only: symbolic
links and submodules are left out, so nothing outside the checkout is ever read). Each
cycle plans that tree, and every report names the commit; a message naming a file of a
tree names it as the user knows it, ``reconcile.yaml:4 (commit 1a2b3c4)``
(:func:`in_repository`: the one place tree paths are mapped). A fetch that fails keeps the
last commit (said in the log); the previous tree is kept until a newer one is written,
and every tree a cycle holds (:meth:`Source.holding`) until that cycle ends: a commit
checked out meanwhile (another environment's poll, two commits pushed in quick
succession) never removes the files a plan is reading.
:class:`SharedCheckout` lets several environments plan one branch: one fetch at a time for
all of them, each environment's request made from the same checked-out tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import stat
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

from reconciler.errors import ReconcileError, SpecError
from reconciler.execution.requests import PlanRequest
from reconciler.jetstream.transport import settled
from reconciler.specs.ignore import IGNORE_FILE

if TYPE_CHECKING:
    from reconciler.specs.project import Project

MakeRequest = Callable[[Path | None], PlanRequest]
_T = TypeVar("_T")


async def in_daemon_thread(work: Callable[[], _T]) -> _T:
    """``work()`` in a daemon thread of its own: a git server that stops answering keeps
    only that thread, never the agent's exit (``asyncio.to_thread`` uses the loop's
    executor, whose shutdown at the end of ``asyncio.run`` waits for every thread it
    ran: SIGTERM during a hung fetch waited as long as the fetch)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(result: _T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[_T | None, BaseException | None] = (work(), None)
        except BaseException as err:  # handed to the awaiting task
            outcome = (None, err)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="reconcile-git", daemon=True).start()
    return await done


class Source(Protocol):
    #: The project file's last edit not served, and since when (None: served, or no
    #: project file read again: :class:`FixedSource`'s only).
    project_error: tuple[str, float] | None
    #: How many edits of the project file were read and are served (after the first read).
    project_reads: int
    #: The file whose last edit was read (the project file, or the ``.reconcileignore``
    #: beside it; None: never one: :class:`FixedSource`'s only).
    edited: Path | None

    @property
    def commit(self) -> str | None: ...

    @property
    def committed_at(self) -> float | None:
        """Unix time of the commit (its committer time)."""
        ...

    async def refresh(self) -> bool:
        """Look for a newer commit; True when one was found (and checked out)."""
        ...

    def request(self) -> PlanRequest:
        """The plan request for what is checked out now."""
        ...

    def holding(self) -> contextlib.AbstractContextManager[None]:
        """What is checked out now kept while the block runs (a cycle plans it): its
        files are never removed meanwhile."""
        ...

    def shown(self, text: str) -> str:
        """``text`` (a message: an error, a log line) naming files as the user knows
        them: a git tree's as the repository's, with the commit (:func:`in_repository`)."""
        ...


class FixedSource:
    """The paths and connection the command line named (no git). The project file the
    request was made from (``reconcile.yaml``, ``--project``), and the
    ``.reconcileignore`` beside it, are read again when one changes (its size or
    modification time), as spec files are: the request made from them serves the next
    cycles (an environment's lifecycle, overlays, policies, server). An edit that cannot
    make one (an invalid file, at its FILE:LINE) keeps the last one made, and
    :attr:`project_error` says why until the file is mended."""

    commit: str | None = None
    committed_at: float | None = None

    def __init__(self, make: MakeRequest) -> None:
        self._make = make
        self._request = make(None)
        self._stamp = _stamp(self._request)
        self.project_error: tuple[str, float] | None = None
        self.project_reads = 0
        self.edited: Path | None = None

    async def refresh(self) -> bool:
        return False

    def holding(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # the files are the user's: never removed

    def shown(self, text: str) -> str:
        return text  # the paths as the user gave them

    def request(self) -> PlanRequest:
        stamp = _stamp(self._request)
        if stamp != self._stamp:
            self.edited = _edited(self._request, self._stamp, stamp)
            self._stamp = stamp
            try:
                self._request = self._make(None)
            except ReconcileError as err:  # the last good request is kept
                since = self.project_error[1] if self.project_error else time.time()
                self.project_error = (str(err), since)
            else:
                self.project_error = None
                self.project_reads += 1
        return self._request


Stamp = tuple[tuple[int, int] | None, ...]


@dataclass
class _Read:
    """One project file read: what ``load_project`` gave (or its error), and what the
    agent worked out of it (:meth:`ProjectReads.derived`)."""

    stamp: Stamp
    digest: str
    project: Project | None
    error: ReconcileError | None
    derived: dict[Hashable, tuple[Any, ReconcileError | None]] = field(default_factory=dict)


class ProjectReads:
    """The project file as every environment of one agent reads it (``watch --all-envs``,
    ``--shard``): read and validated once per change, not once per environment. Each
    environment's task makes its own request after an edit (or before each cycle of a
    ``--git`` commit), and each read the whole file again, an N-environment file N times
    (2N with the list's check): O(N^2) per edit, the last environment waiting for all the
    others' reads. A read is kept by the file's path and the size and modification time
    of it and of the ``.reconcileignore`` beside it (which it reads), as
    :class:`FixedSource` sees an edit: a file changed is read again, once; one whose text
    changed while it was read (its digest before and after) is not kept. An invalid
    file's error is kept as well (each caller gets its own copy: one refusal, the last
    valid project kept by each environment's source). The project given out is shared
    by every environment: its mappings are read-only views. :meth:`derived` keeps what
    is worked out of one read (the environments to serve, the accounts' check) for
    every caller."""

    #: Reads kept (a ``--git`` agent's: the commit's tree and the one before).
    KEPT = 4

    def __init__(self) -> None:
        self._reads: dict[Path, _Read] = {}
        self.loads = 0  # files read and validated (a bench counts them)

    def load(self, path: Path) -> Project:
        """``load_project(path)``, read again only when the file changed."""
        read = self._reads.get(path)
        if read is None or read.stamp != _stamp_of(path):
            read = self._read(path)
        if read.error is not None:
            raise _again(read.error)
        assert read.project is not None
        return read.project

    def derived(self, project: Project, what: Hashable, work: Callable[[], _T]) -> _T:
        """``work()`` (what is called ``what`` of ``project``, one that :meth:`load` gave),
        done once for every caller: its value, or its error (a copy raised to each)."""
        read = next((r for r in self._reads.values() if r.project is project), None)
        if read is None:  # not kept (changed while it was read): worked out each time
            return work()
        if what not in read.derived:
            try:
                read.derived[what] = (work(), None)
            except ReconcileError as err:
                read.derived[what] = (None, err)
        value, error = read.derived[what]
        if error is not None:
            raise _again(error)
        return value  # type: ignore[no-any-return]

    def _read(self, path: Path) -> _Read:
        from reconciler.specs import project as projects

        self.loads += 1
        stamp, digest = _stamp_of(path), _digest(path)
        try:
            read = _Read(stamp, digest, _read_only(projects.load_project(path)), None)
        except ReconcileError as err:
            read = _Read(stamp, digest, None, _again(err))
        self._reads.pop(path, None)
        if digest and _digest(path) == digest and _stamp_of(path) == stamp:
            self._reads[path] = read  # kept: not changed while it was read
            while len(self._reads) > self.KEPT:
                del self._reads[next(iter(self._reads))]
        return read


def _project_files(path: Path) -> tuple[Path, Path]:
    """The project file ``path`` and the ``.reconcileignore`` beside it."""
    return path, path.parent / IGNORE_FILE


def _stamp_of(path: Path) -> Stamp:
    """The size and modification time of each of :func:`_project_files` (None: not there)."""
    found: list[tuple[int, int] | None] = []
    for file in _project_files(path):
        try:
            stat_ = file.stat()
            found.append((stat_.st_size, stat_.st_mtime_ns))
        except OSError:
            found.append(None)
    return tuple(found)


def _digest(path: Path) -> str:
    """The digest of the text of :func:`_project_files` ("": the project file cannot be
    read; ``load_project`` says why)."""
    digest = hashlib.sha256()
    for file in _project_files(path):
        try:
            text = file.read_bytes()
        except OSError:
            if file == path:
                return ""
            text = b"none"
        digest.update(b"%d\0" % len(text) + text)
    return digest.hexdigest()


def _again(err: ReconcileError) -> ReconcileError:
    """A copy of ``err`` to raise (one exception object is never raised in two tasks)."""
    if isinstance(err, SpecError):
        return SpecError(list(err.problems), kind=err.kind)
    return ReconcileError(str(err))


def _read_only(project: Project) -> Project:
    """``project`` with read-only mappings: it is shared by every environment's task."""
    environments = {
        name: replace(env, settings=MappingProxyType(dict(env.settings)))
        for name, env in project.environments.items()
    }
    return replace(
        project,
        environments=MappingProxyType(environments),
        places=MappingProxyType(dict(project.places)),
    )


def _watched(request: PlanRequest) -> tuple[Path, ...]:
    """The project file ``request`` was made from and the ``.reconcileignore`` beside
    it (none without a project)."""
    return () if request.project is None else _project_files(request.project.path)


def _edited(request: PlanRequest, before: Stamp | None, now: Stamp | None) -> Path | None:
    """Which file of :func:`_watched` changed between the stamps ``before`` and ``now``
    (the project file when both did)."""
    paths = _watched(request)
    changed = [
        p for i, p in enumerate(paths) if before is None or now is None or before[i] != now[i]
    ]
    return changed[0] if changed else None


def _stamp(request: PlanRequest) -> Stamp | None:
    """The size and modification time of each file of :func:`_watched` (None each: not
    there); None: no project."""
    if request.project is None:
        return None
    return _stamp_of(request.project.path)


def _secrets(url: str) -> dict[str, str]:
    """Each part of a git URL that may hold a credential -> what shows instead: the user
    info (``user:token@``, ``token@``; also in scp-like ``user:token@host:path``), its
    password alone (as written and decoded), the query (``?access_token=``) and the
    fragment."""
    if "://" in url:
        parts = urlsplit(url)
        found = {parts.query: "***", parts.fragment: "***"}
        userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    else:
        found, userinfo = {}, url.rsplit("@", 1)[0] if "@" in url else ""
    password = userinfo.partition(":")[2]
    found.update({f"{userinfo}@": "***@", password: "***", unquote(password): "***"})
    return {secret: shown for secret, shown in found.items() if secret not in ("", "@")}


def redact_git_url(url: str, text: str | None = None) -> str:
    """``text`` (default: ``url`` itself) with every credential ``url`` may hold replaced:
    ``https://user:token@host/repo?access_token=t`` -> ``https://***@host/repo?***``. A
    fetch error's text goes through it too (git libraries quote the URL they used)."""
    shown = url if text is None else text
    secrets = _secrets(url)
    for secret in sorted(secrets, key=len, reverse=True):
        shown = shown.replace(secret, secrets[secret])
    return shown


class TreePaths:
    """Paths into the commits' trees under ``trees`` (``trees/<commit>/FILE``) in a
    message, as written, absolute or resolved (a repository-root check resolves them)."""

    def __init__(self, trees: Path) -> None:
        forms = {str(trees), os.path.abspath(trees), os.path.realpath(trees)}
        self.forms = sorted(forms, key=len, reverse=True)
        prefixes = "|".join(re.escape(form) for form in self.forms)
        self.pattern = re.compile(
            rf"(?P<q>['\"]?)(?:{prefixes})/(?P<commit>[0-9a-f]{{40}})"
            rf"(?:/(?P<file>[^\s'\":,;()\[\]]+))?(?P=q)(?P<line>:\d+)?"
        )


def in_repository(text: str, trees: TreePaths) -> str:
    """``text`` with each path into a commit's tree said as the user knows the file: its
    path in the repository, then the commit (``reconcile.yaml:4 (commit 1a2b3c4)``; the
    tree itself: ``the tree of commit 1a2b3c4``), never the cache folder's path, which
    for an older commit's tree is removed by the time it is read. The one place the
    agent maps tree paths: every message of an environment (its log lines, the
    connection's and the cycle's error in ``/status`` and ``/readyz``) and the start's
    errors go through it."""
    if not any(form in text for form in trees.forms):
        return text

    def said(found: re.Match[str]) -> str:
        commit = f"commit {found['commit'][:7]}"
        if found["file"] is None:
            return f"the tree of {commit}"
        quote, line = found["q"], found["line"] or ""
        return f"{quote}{found['file']}{quote}{line} ({commit})"

    return trees.pattern.sub(said, text)


class GitSource:
    """A branch of a git repository, fetched into ``cache`` (its project file is each
    commit's)."""

    project_error: tuple[str, float] | None = None
    project_reads = 0
    edited: Path | None = None

    def __init__(self, url: str, ref: str, cache: Path, make: MakeRequest) -> None:
        self.url = url
        self.ref = ref
        self.cache = cache
        self._make = make
        self.commit: str | None = None
        self.committed_at: float | None = None
        self._tree: Path | None = None
        #: commit -> the cycles planning its tree now (kept by :meth:`_checkout`)
        self._held: Counter[str] = Counter()
        self._holds = threading.Lock()  # _checkout reads _held in its thread
        self._trees = TreePaths(cache / "trees")

    def shown(self, text: str) -> str:
        return in_repository(text, self._trees)

    @property
    def shown_url(self) -> str:
        return redact_git_url(self.url)

    async def refresh(self) -> bool:
        head, when = await in_daemon_thread(self._fetch)
        if head == self.commit:
            return False
        self._tree = await in_daemon_thread(lambda: self._checkout(head))
        self.commit, self.committed_at = head, when
        return True

    def request(self) -> PlanRequest:
        return self._make(self.tree)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """The tree of the commit checked out now kept until the block ends: a checkout
        meanwhile removes every older tree but those held."""
        commit = self.commit
        with self._holds:
            if commit is not None:
                self._held[commit] += 1
        try:
            yield
        finally:
            with self._holds:
                if commit is not None:
                    self._held[commit] -= 1
                    if not self._held[commit]:
                        del self._held[commit]

    @property
    def tree(self) -> Path:
        """The checked-out tree of the last commit fetched."""
        if self._tree is None:
            raise ReconcileError(f"no commit of {self.shown_url} {self.ref} fetched yet")
        return self._tree

    # -- dulwich, in a thread ------------------------------------------------------------
    def _repo(self) -> Any:
        from dulwich.repo import Repo

        bare = self.cache / "repo.git"
        if (bare / "HEAD").is_file():
            return Repo(str(bare))
        bare.mkdir(parents=True, exist_ok=True)
        return Repo.init_bare(str(bare))

    def _fetch(self) -> tuple[str, float]:
        """The branch head's commit id and time, its objects fetched."""
        from dulwich.client import get_transport_and_path

        branch = f"refs/heads/{self.ref}".encode()
        repo = self._repo()
        try:
            client: Any
            client, path = get_transport_and_path(self.url)

            def wants(refs: Any, depth: Any = None) -> list[bytes]:
                found = refs.get(branch)
                return [found] if found is not None and found not in repo.object_store else []

            result = client.fetch(path, repo, determine_wants=wants)
        except Exception as err:  # dulwich raises many kinds: each is a failed fetch
            raise ReconcileError(
                f"cannot fetch {self.shown_url}: {type(err).__name__}: "
                + redact_git_url(self.url, str(err))[:200]
            ) from None
        finally:
            repo.close()
        refs: Any = result.refs
        head = refs.get(branch)
        if head is None:
            raise ReconcileError(f"{self.shown_url} has no branch {self.ref!r}")
        repo = self._repo()
        try:
            commit = repo[head]
            return head.decode(), float(commit.commit_time)
        finally:
            repo.close()

    def _checkout(self, head: str) -> Path:
        """Write commit ``head``'s tree to ``trees/<head>/`` (atomically), drop older trees
        but the one in use and those a cycle holds (:meth:`holding`: only the commit
        checked out is ever taken, and it is kept here, so none is taken meanwhile)."""
        trees = self.cache / "trees"
        target = trees / head
        if not target.is_dir():
            staging = trees / f".{head}.{uuid.uuid4().hex}"
            repo = self._repo()
            try:
                _write_tree(repo, repo[head.encode()].tree, staging)
                staging.rename(target)
            except OSError as err:
                # a name too long, a full disk: a failed fetch (the last commit is kept),
                # said without the name (the commit's text)
                shutil.rmtree(staging, ignore_errors=True)
                reason = (err.strerror or type(err).__name__).lower()
                raise ReconcileError(
                    f"cannot write the tree of commit {head[:12]}: {reason}"
                ) from None
            finally:
                repo.close()
        with self._holds:
            keep = {head, self.commit, *self._held}
        for old in trees.iterdir():
            if old.name not in keep:
                shutil.rmtree(old, ignore_errors=True)
        return target


def _write_tree(repo: Any, tree_id: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for entry in repo[tree_id].iteritems():
        name = entry.path.decode("utf-8", "surrogateescape")
        if name in ("", ".", "..") or "/" in name or "\\" in name:
            continue  # never a path out of the folder
        if stat.S_ISDIR(entry.mode):
            _write_tree(repo, entry.sha, folder / name)
        elif stat.S_ISREG(entry.mode):
            (folder / name).write_bytes(repo[entry.sha].data)
        # symbolic links and submodules: left out


class SharedCheckout:
    """One branch planned by several environments (``watch --all-envs --git``): one fetch
    at a time into the one clone, and none within :data:`FETCH_GAP` seconds of the last
    (every environment polls; one fetch answers them all)."""

    FETCH_GAP = 1.0

    def __init__(self, source: GitSource) -> None:
        self.source = source
        self._fetch: asyncio.Future[bool] | None = None
        self._started = -self.FETCH_GAP
        #: told of each new commit's tree, once (the agent: the environments it names)
        self.on_commit: Callable[[Path], None] | None = None

    async def refresh(self) -> None:
        loop = asyncio.get_running_loop()
        done = self._fetch is None or self._fetch.done()
        if done and loop.time() - self._started >= self.FETCH_GAP:
            self._started = loop.time()
            self._fetch = asyncio.ensure_future(self.source.refresh())
            self._fetch.add_done_callback(settled)  # each view may stop waiting for it
            self._fetch.add_done_callback(self._checked_out)
        assert self._fetch is not None
        await asyncio.shield(self._fetch)

    def _checked_out(self, fetch: asyncio.Future[bool]) -> None:
        if fetch.cancelled() or fetch.exception() is not None or not fetch.result():
            return
        if self.on_commit is not None:
            self.on_commit(self.source.tree)

    def view(self, make: MakeRequest) -> CheckoutView:
        """The source of one environment: ``make(tree)`` its request."""
        return CheckoutView(self, make)


class CheckoutView:
    """One environment's view of a :class:`SharedCheckout`."""

    project_error: tuple[str, float] | None = None
    project_reads = 0
    edited: Path | None = None

    def __init__(self, shared: SharedCheckout, make: MakeRequest) -> None:
        self._shared = shared
        self._make = make
        self._seen: str | None = None

    @property
    def commit(self) -> str | None:
        return self._shared.source.commit

    @property
    def committed_at(self) -> float | None:
        return self._shared.source.committed_at

    async def refresh(self) -> bool:
        await self._shared.refresh()
        new, self._seen = self.commit != self._seen, self.commit
        return new

    def request(self) -> PlanRequest:
        return self._make(self._shared.source.tree)

    def holding(self) -> contextlib.AbstractContextManager[None]:
        return self._shared.source.holding()

    def shown(self, text: str) -> str:
        return self._shared.source.shown(text)
