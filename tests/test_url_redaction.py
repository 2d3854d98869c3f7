"""No part of a password is ever printed, also when it holds an unencoded '@'."""

from __future__ import annotations

import pytest

from kit.cli import main
from kit.discovery import password_of, redact
from kit.report.meta import Scrubber

SECRET_PARTS = ("s3cr3t", "t4il9")
URLS = (
    "postgresql+psycopg://postgres:s3cr3t@t4il9@127.0.0.1:5432/test",
    "mysql+pymysql://root:s3cr3t@t4il9@127.0.0.1:3306/test?charset=utf8mb4",
    "postgresql+psycopg://postgres:s3cr3t%40t4il9@127.0.0.1:5432/test",
    "postgresql+psycopg://postgres:s3cr3t:t4il9@@127.0.0.1/test",
    "postgresql+psycopg://postgres@127.0.0.1/test?password=s3cr3t@t4il9",
)


@pytest.mark.parametrize("url", URLS)
def test_redact_hides_every_part_of_the_password(url: str) -> None:
    shown = redact(url)
    assert not any(part in shown for part in SECRET_PARTS), shown
    assert "127.0.0.1" in shown and "***" in shown


@pytest.mark.parametrize("url", URLS[:4])
def test_reports_scrub_every_part_of_the_password(url: str) -> None:
    password = password_of(url)
    assert password in ("s3cr3t@t4il9", "s3cr3t:t4il9@")
    scrub = Scrubber.for_urls([url])
    text = scrub.text(f"connecting to {url} failed: host 't4il9@127.0.0.1' unknown; password {password}")
    assert not any(part in text for part in SECRET_PARTS), text


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_a_url_with_an_unencoded_at_in_its_password_is_refused_without_printing_it(
    backend: str, capsys: pytest.CaptureFixture[str],
) -> None:
    url = URLS[0] if backend == "postgres" else URLS[1]
    code = main(["check", backend, "--url", url, "--no-report"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "%40" in text and not any(part in text for part in SECRET_PARTS), text
