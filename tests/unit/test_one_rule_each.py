"""Each rule in one place: the front doors reuse the engine's URL redaction, Markdown
escaping, RFC 3339 timestamps and server facts instead of writing their own."""

from __future__ import annotations

import pytest

from action.comment import CommentError, GitHubAPI


@pytest.mark.parametrize("url", ["ftp://alice:s3cret@h:4222", "ftp://T0KEN@h", "alice:s3cret@h"])
def test_a_refused_api_url_is_shown_without_its_credentials(url: str) -> None:
    with pytest.raises(CommentError) as refused:
        GitHubAPI(api_url=url, token="")
    assert "s3cret" not in str(refused.value) and "T0KEN" not in str(refused.value)
