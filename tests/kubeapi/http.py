"""A plain HTTP client for tests of the test API server's own wire format (no kubernetes client in between)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    code: int
    headers: dict[str, str]  # names in lower case
    body: Any


def call(base_url: str, method: str, path: str, body: Any = None) -> Answer:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base_url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return Answer(response.status, {k.lower(): v for k, v in response.headers.items()}, json.load(response))
    except urllib.error.HTTPError as error:
        headers = {k.lower(): v for k, v in error.headers.items()}
        return Answer(error.code, headers, json.loads(error.read()))
