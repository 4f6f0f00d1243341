"""One sticky pull-request comment per spec path, through GitHub's REST API.

The comment starts with a hidden marker, ``<!-- jetstream-gitops:<path> -->``. Each run
lists the pull request's comments (every page), edits the one carrying its marker that a
bot or someone with write access wrote (anyone can type a marker), and posts a new one
only when none does, so a busy pull request gets one comment per path,
kept current, never a pile. Bodies are capped at GitHub's 65,536 characters, cut where
no code block or ``<details>`` is left open.

Plain ``urllib.request`` against ``GITHUB_API_URL`` (GitHub Enterprise has its own) with
the job's token; the token is sent in a header only and never appears in a message.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reconciler.errors import ReconcileError

#: GitHub rejects issue comments longer than this many characters.
COMMENT_LIMIT = 65_536
PAGE_SIZE = 100
MAX_PAGES = 100  # 10,000 comments: far beyond any real pull request

#: Where a cut comment points for the whole plan (``render.markdown.fit`` writes the note).
FULL_PLAN_WHERE = "the workflow run's step summary and its plan artifact (`upload-plan: true`)"

_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


class CommentError(ReconcileError):
    """The GitHub API refused or failed a comment request."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class PullRequest:
    repository: str  # "owner/name"
    number: int

    @classmethod
    def from_event(cls, *, event_name: str, event_path: str, repository: str) -> PullRequest | None:
        """The pull request a ``pull_request``/``pull_request_target`` event is about."""
        if event_name not in ("pull_request", "pull_request_target") or not event_path:
            return None
        payload = json.loads(Path(event_path).read_text(encoding="utf-8"))
        number = payload.get("pull_request", {}).get("number", payload.get("number"))
        if not isinstance(number, int) or not repository:
            return None
        return cls(repository=repository, number=number)


@dataclass(frozen=True)
class CommentResult:
    action: Literal["created", "updated"]
    id: int
    url: str


def marker(path: str) -> str:
    """The hidden marker naming the spec path a comment belongs to."""
    safe = path.replace("--", "%2D%2D").replace(">", "%3E")
    return f"<!-- jetstream-gitops:{safe} -->"


def comment_body(markdown: str, *, path: str) -> str:
    """Marker + Markdown (CLI flags named as Action inputs: ``action.flags``), cut when
    over the comment limit (``render.markdown.fit``: at a line end outside any code
    fence, open ``<details>`` closed, a note pointing at the full plan)."""
    from action.flags import as_inputs
    from reconciler.render.markdown import fit

    head = marker(path) + "\n"
    return head + fit(as_inputs(markdown), COMMENT_LIMIT - len(head), where=FULL_PLAN_WHERE)


class GitHubAPI:
    """The few REST calls the action makes, with the token in the Authorization header."""

    def __init__(self, *, api_url: str, token: str, timeout: float = 30.0) -> None:
        scheme = urllib.parse.urlsplit(api_url).scheme
        if scheme not in ("http", "https"):
            from reconciler.jetstream.connection import redact_url

            shown = redact_url(api_url)  # the engine's one redaction: no secret printed
            raise CommentError(f"GITHUB_API_URL must be an http(s) URL, not {shown!r}")
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def request(self, method: str, url: str, body: Any = None) -> tuple[Any, str]:
        """JSON body and ``Link`` header of one call; ``url`` may be relative to the API."""
        if url.startswith("/"):
            url = self.api_url + url
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        req.add_header("User-Agent", "jetstream-gitops-action")
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                link = resp.headers.get("Link", "")
        except urllib.error.HTTPError as err:
            raise CommentError(
                f"GitHub API {method} {urllib.parse.urlsplit(url).path} answered {err.code}",
                status=err.code,
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise CommentError(f"GitHub API unreachable: {reason}") from None
        try:
            return (json.loads(raw) if raw else None), link
        except (UnicodeDecodeError, ValueError, RecursionError):  # a proxy's login page, say
            path = urllib.parse.urlsplit(url).path
            raise CommentError(f"GitHub API {method} {path} answered with no JSON") from None


def list_comments(api: GitHubAPI, pr: PullRequest) -> list[dict[str, Any]]:
    """Every comment of the pull request, following the ``Link: rel="next"`` pages."""
    url: str | None = (
        f"/repos/{pr.repository}/issues/{pr.number}/comments?per_page={PAGE_SIZE}&page=1"
    )
    comments: list[dict[str, Any]] = []
    for _ in range(MAX_PAGES):
        if url is None:
            break
        batch, link = api.request("GET", url)
        if not isinstance(batch, list):
            raise CommentError("GitHub API returned an unexpected comment list")
        comments.extend(c for c in batch if isinstance(c, dict))
        found = _NEXT_LINK.search(link)
        url = found.group(1) if found else None
    return comments


#: Who may have written this tool's comment, besides a bot (the job's token writes as
#: ``github-actions[bot]``): someone with write access, whose token the step may use.
WRITERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


def _ours(comment: dict[str, Any], tag: str) -> bool:
    """Whether ``comment`` is this path's comment: its marker, written by a bot or a
    writer. Anyone may type the marker: a contributor's comment carrying it is theirs,
    never edited (the plan reviewers read would sit where its author can rewrite it)."""
    user = comment.get("user")
    by_bot = isinstance(user, dict) and user.get("type") == "Bot"
    trusted = by_bot or comment.get("author_association") in WRITERS
    return trusted and str(comment.get("body", "")).startswith(tag)


def upsert_comment(api: GitHubAPI, pr: PullRequest, *, path: str, markdown: str) -> CommentResult:
    """Edit this path's comment on the pull request, or post it if there is none yet."""
    body = comment_body(markdown, path=path)
    tag = marker(path)
    existing = next((c for c in list_comments(api, pr) if _ours(c, tag)), None)
    if existing is not None:
        url = f"/repos/{pr.repository}/issues/comments/{int(existing['id'])}"
        answer, _ = api.request("PATCH", url, {"body": body})
        action: Literal["created", "updated"] = "updated"
    else:
        url = f"/repos/{pr.repository}/issues/{pr.number}/comments"
        answer, _ = api.request("POST", url, {"body": body})
        action = "created"
    if not isinstance(answer, dict):
        raise CommentError("GitHub API returned an unexpected comment")
    return CommentResult(action=action, id=int(answer["id"]), url=str(answer.get("html_url", "")))
