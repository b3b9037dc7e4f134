"""Credentials never leave in text: a URL's userinfo and secret-looking query parameters, in any message,
in every error of the project's tree and in every log line; the policy warns about a password in its URL
and refuses a Prometheus URL with a query."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from rebalancer.app.cli import main
from rebalancer.domain.errors import ConfigError, MetricsUnavailable
from rebalancer.domain.redaction import RedactingFormatter, redact, redact_url, url_credentials
from rebalancer.policy import parse_policy_warning

STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
# what urllib3 says when Prometheus cannot be reached (the URL of the request, with its query, is in it)
URLLIB3 = (
    "cannot reach Prometheus at http://admin:hunter2@10.0.0.1:9090: HTTPConnectionPool(host='10.0.0.1', "
    "port=9090): Max retries exceeded with url: /api/v1/query?access_token=s3cret&query=up&time=1.000 "
    "(Caused by NewConnectionError(...))"
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://admin:hunter2@host:9090/x", "http://***@host:9090/x"),
        ("https://TOKEN123@host", "https://***@host"),
        ("at 'http://a:p@ss/w@rd@host/' now", "at 'http://***@host/' now"),  # unencoded @ and / in the password
        ("GET /q?query=up&api_key=k1&time=1", "GET /q?query=up&api_key=***&time=1"),
        ("/x?Password=p&X-Amz-Signature=abc;session_id=9", "/x?Password=***&X-Amz-Signature=***;session_id=***"),
        ("headers: {'Authorization': 'Bearer abc.def'}", "headers: {'Authorization': 'Bearer ***'}"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
        ("http://host:9090/api/v1/query?query=up&time=1", "http://host:9090/api/v1/query?query=up&time=1"),
        ("a bearer token is required; user@example.com", "a bearer token is required; user@example.com"),
    ],
)
def test_redact_removes_credentials_and_keeps_the_rest(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("password", ["it's", 'say"hi', "<b>old", "a b", "p@ss/w#rd?"])
def test_a_url_setting_is_shown_without_its_password_whatever_it_holds(password: str) -> None:
    """A generated password holds quotes and angle brackets: the filter for URLs in any text takes them for the
    URL's end, a URL known to be one is cut at its last @."""
    shown = redact_url(f"http://admin:{password}@prometheus:9090/prom")
    assert shown == "http://***@prometheus:9090/prom"
    assert redact_url("https://prometheus:9090/?token=t0k3n") == "https://prometheus:9090/?token=***"


@pytest.mark.parametrize("password", ["it's", "a b"])
def test_a_refused_prometheus_url_is_shown_without_its_password(password: str) -> None:
    quoted = password.replace("'", "''")  # in a single-quoted YAML scalar
    text = f"prometheus: {{url: 'http://admin:{quoted}@prometheus:9090/?x=1'}}\n" + STRATEGY
    with pytest.raises(ConfigError) as caught:
        parse_policy_warning(text)
    assert "prometheus.url: 'http://***@prometheus:9090/?x=1'" in str(caught.value)
    assert password not in str(caught.value)


def test_the_library_message_keeps_its_cause_without_the_secrets() -> None:
    assert redact(URLLIB3) == (
        "cannot reach Prometheus at http://***@10.0.0.1:9090: HTTPConnectionPool(host='10.0.0.1', "
        "port=9090): Max retries exceeded with url: /api/v1/query?access_token=***&query=up&time=1.000 "
        "(Caused by NewConnectionError(...))"
    )


def test_every_error_of_the_tree_is_redacted() -> None:
    error = MetricsUnavailable(URLLIB3)
    assert "hunter2" not in str(error) and "s3cret" not in str(error) and "hunter2" not in repr(error)
    config = ConfigError("p.yaml", [("prometheus.url", "'http://u:hunter2@h x' is not an http(s) URL")])
    assert config.problems == [("prometheus.url", "'http://***@h x' is not an http(s) URL")]
    assert "hunter2" not in str(config)


def test_the_log_formatter_redacts_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("connecting to %s", "http://admin:hunter2@host")
        try:
            raise ValueError("Invalid URL 'http://admin:hunter2@host?token=t0k3n'")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "WARNING connecting to http://***@host" in text
    assert "Invalid URL 'http://***@host?token=***'" in text  # the traceback's last line
    assert "hunter2" not in text and "t0k3n" not in text


def test_url_credentials() -> None:
    assert url_credentials("http://u:p@h") == "a password (user:password@)"
    assert url_credentials("http://tok@h") == "a user name (user@), which may be a token"
    assert url_credentials("http://h:9090") is None


def test_a_password_in_the_prometheus_url_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "prometheus: {url: 'http://admin:hunter2@prometheus:9090'}\n" + STRATEGY
    _, warnings = parse_policy_warning(text)
    [warning] = warnings
    assert warning.startswith("prometheus.url: holds a password (user:password@): it is never printed")
    assert "prometheus.bearerTokenFile" in warning
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  warning: prometheus.url: holds a password" in out and "hunter2" not in out


@pytest.mark.parametrize("url", ["http://prometheus:9090/?token=x", "http://prometheus:9090/#x", "http://p:9090?"])
def test_the_prometheus_url_takes_no_query(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"prometheus: {{url: '{url}'}}\n" + STRATEGY)
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "prometheus.url: " in err and "is a base URL: the API's paths (/api/v1/query) are appended to it" in err
