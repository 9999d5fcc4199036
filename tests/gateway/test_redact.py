"""The one redaction helper: credentials of a URL never leave the process, hosts and ports stay."""

from __future__ import annotations

from gateway.backends.identity import identity
from gateway.redact import redact, without_credentials


def test_a_url_loses_its_credentials_and_keeps_the_rest() -> None:
    assert without_credentials("http://gw:pw@10.0.0.5:8000/v1") == "http://10.0.0.5:8000/v1"
    assert without_credentials("https://token@host") == "https://host"
    assert without_credentials("http://us:p@ss@host:1") == "http://host:1"  # an unescaped @ in the password
    assert without_credentials("http://127.0.0.1:8101") == "http://127.0.0.1:8101"


def test_every_url_in_a_text_loses_its_credentials() -> None:
    text = "GET http://gw:pw@10.0.0.5:8000/health failed; then https://a:b@c@h2/x?q=u@v and http://plain:1/"
    bare = "GET http://10.0.0.5:8000/health failed; then https://h2/x?q=u@v and http://plain:1/"
    assert redact(text) == bare
    assert redact("no url here: user@example.org") == "no url here: user@example.org"


def test_saved_identities_use_the_same_helper() -> None:
    url = "http://gw:pw@h:1"
    assert identity("a", url, ["m"]).url == without_credentials(url) == "http://h:1"
