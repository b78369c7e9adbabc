"""`toren.worker._redact` on its own: which texts a `Redactor` changes, and exactly how.

Pure and fast, so mutation testing runs it on every mutant of the module (`tests/mutation.md`);
`tests/test_redaction.py` follows secrets through a real run.
"""

from __future__ import annotations

from toren.worker._redact import MARKER, MIN_SECRET_CHARS, Redactor, forms, redactor


def test_short_values_are_left_alone() -> None:
    assert MIN_SECRET_CHARS == 4
    assert Redactor(["abc", "abcd"]).secrets == ("abcd",)
    assert Redactor(["abc"]).text("abc abc") == "abc abc"
    assert Redactor([]).value({"k": ["v"]}) == {"k": ["v"]}
    assert Redactor([]).spans("anything") == []
    assert Redactor([]).longest == 0


def test_a_secret_of_exactly_the_minimum_length_is_redacted() -> None:
    assert Redactor(["abcd"]).text("x abcd y") == f"x {MARKER} y"


def test_where_one_secret_holds_another_the_whole_of_it_goes() -> None:
    both = Redactor(["secret", "secret-long-value"])
    assert both.text("a secret-long-value and a secret") == f"a {MARKER} and a {MARKER}"
    assert both.longest == len("secret-long-value")
    assert both.spans("a secret-long-value, secret") == [(2, 19), (21, 27)]


def test_a_url_secret_is_redacted_whole_and_by_its_password() -> None:
    url = "postgresql://agent:s%40cret-pw@db/shop"
    assert url in forms(url)
    hidden = Redactor([url])
    assert hidden.text(f"connect {url} now") == f"connect {MARKER} now"
    assert hidden.text("auth failed for s@cret-pw") == f"auth failed for {MARKER}"
    assert hidden.text("pw s%40cret-pw") == f"pw {MARKER}"


def test_a_failure_keeps_its_kind_and_loses_its_secrets() -> None:
    from datetime import timedelta

    from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

    hidden = Redactor(["tok-12345"])
    original = ApplicationError(
        "upstream refused tok-12345",
        {"key": "tok-12345"},
        "tok-12345 again",
        type="Upstream",
        non_retryable=True,
        next_retry_delay=timedelta(seconds=3),
        category=ApplicationErrorCategory.BENIGN,
    )
    failure = hidden.failure(original)
    assert failure.message == f"upstream refused {MARKER}"
    assert list(failure.details) == [{"key": MARKER}, f"{MARKER} again"]
    assert failure.type == "Upstream" and failure.non_retryable
    assert failure.next_retry_delay == timedelta(seconds=3)
    assert failure.category == ApplicationErrorCategory.BENIGN
    assert failure.__cause__ is None
    retryable = hidden.failure(ApplicationError("x tok-12345"))
    assert not retryable.non_retryable and retryable.type is None
    other = hidden.failure(ValueError("bad tok-12345"))
    assert isinstance(other, ApplicationError)
    assert other.message == f"bad {MARKER}" and other.type == "ValueError"
    assert not other.non_retryable and list(other.details) == []


def test_one_redactor_per_set_of_secrets() -> None:
    first = redactor(["tok-12345", "key-67890"])
    assert redactor(("key-67890", "tok-12345", "key-67890")) is first
    assert redactor(["tok-12345"]) is not first
    assert first.secrets == ("key-67890", "tok-12345")
