"""Credentials kept out of everything rebalancer prints.

:func:`redact` is the one filter for text that leaves the process (logs, output, error messages, Events):
the userinfo of a URL (``http://user:password@host``) and the value of a query parameter whose name looks
like a secret (``?token=``, ``&password=``, ``api_key=``, ``X-Amz-Signature=``) become ``***``, wherever
they are in the text, so that the messages of requests, urllib3 and the Kubernetes client, which embed
URLs, are covered too. Every :class:`~rebalancer.domain.errors.RebalancerError` passes its message
through it, and so does the log formatter of the command line.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

REDACTED = "***"
_STOP = r"\s'\"<>"  # a URL in a message ends at white space, a quote or an angle bracket
# scheme://userinfo@, up to the last @ of the URL: an unencoded @ or / in a password goes too
_USERINFO = re.compile(rf"(?i)\b([a-z][a-z0-9+.-]*://)[^{_STOP}]*@")
_SECRET_NAMES = r"token|passw|pwd|secret|key|auth|credential|signature|session"
_SECRET_PARAMETER = re.compile(rf"(?i)([?&;][^{_STOP}=&;#?]*(?:{_SECRET_NAMES})[^{_STOP}=&;#?]*=)[^{_STOP}&;#)]*")
_AUTHORIZATION = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:bearer|basic)\s+)[^\s'\"]+")


def redact(text: str) -> str:
    """``text`` without the credentials of the URLs in it (userinfo, secret-looking query parameters) and
    without the credentials of an ``Authorization: Bearer`` or ``Basic`` header."""
    if "://" in text:
        text = _USERINFO.sub(rf"\g<1>{REDACTED}@", text)
    if "=" in text:
        text = _SECRET_PARAMETER.sub(rf"\g<1>{REDACTED}", text)
    return _AUTHORIZATION.sub(rf"\g<1>{REDACTED}", text)


def redact_url(url: str) -> str:
    """A URL known to be one (a setting) as it may be shown: everything between ``scheme://`` and its last ``@``
    becomes ``***`` whatever characters the password holds (:func:`redact`, which finds URLs in any text,
    takes a quote, an angle bracket or white space for the end of the URL), and :func:`redact` does the rest."""
    scheme, sep, rest = url.partition("://")
    at = rest.rfind("@")
    if sep and at >= 0:
        rest = REDACTED + rest[at:]
    return redact(scheme + sep + rest)


def url_credentials(url: str) -> str | None:
    """The credential written into ``url`` itself (its userinfo), described; None when there is none."""
    parts = urlsplit(url)
    if parts.password is not None:
        return "a password (user:password@)"
    if parts.username is not None:
        return "a user name (user@), which may be a token"
    return None


class RedactingFormatter(logging.Formatter):
    """A log formatter whose lines (message, arguments and traceback alike) go through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
