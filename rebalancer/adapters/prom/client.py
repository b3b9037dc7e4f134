"""The Prometheus transport: instant queries through prometheus-api-client, strictly checked answers.

Shared by the usage source (``source.py``) and the history source (``history.py``). Failures become
:class:`~rebalancer.domain.errors.SourceError` subclasses that name the query and the cause:

* ``MetricsUnavailable``: Prometheus unreachable, timed out (also midway through its answer, and an answer
  still incomplete at twice the timeout: see ``deadline.py``), an HTTP error
  (with Prometheus' ``errorType``/``error``, for example the 422 of a query over its sample limit), or
  ``status: error``.
* ``MetricsMalformed``: not an instant vector, a series without its key labels, two series for one key,
  a value that is NaN, infinite, negative or unparsable, an answer with ``warnings`` (Prometheus answers
  with the data it could read and warns, for example when a remote-read endpoint failed: partial data), a
  sample more than a minute from the time asked for (a cache or proxy in front of Prometheus that ignores
  ``time``: every sample of an instant vector carries the evaluation time), a range answer's point more
  than a step or a minute outside the range asked for.

``large_vector`` is ``vector`` for answers of tens of thousands of series (the history source reads one
per day, 30,000 pods each on a large cluster): the library decodes every answer with the standard ``json``
module into dicts that are then walked again, so this one fetches the body on the same session and
decodes it with msgspec straight into typed structs (about twice as fast). Only a plain instant vector
takes that path; anything else is checked exactly as ``vector`` checks it and fails the same way.
``pod_values`` goes further for the usage source's per-pod answer (150,000 series in a scheduled cycle):
straight into (namespace, pod) -> value, no label dict per series.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.exceptions import ReadTimeoutError
from urllib3.util.retry import Retry

from rebalancer.adapters.prom.deadline import AnswerDeadline
from rebalancer.adapters.prom.matrix import PodMatrix, pod_matrix, refuse_warnings
from rebalancer.domain.errors import MetricsMalformed, MetricsUnavailable, TokenFileError
from rebalancer.domain.model import PodKey
from rebalancer.domain.redaction import redact_url
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.domain.token_file import PROMETHEUS_TOKEN_FILE, read_token_file

_log = logging.getLogger(__name__)

Labels = Mapping[str, str]
Vector = list[tuple[Labels, float]]
_MAX_SHOWN = 300  # characters of a body or series shown in an error message
LONG_QUERY_CHARS = 2048  # longer queries are POSTed (see PromClient._fetch)
# How far a sample's time may be from the time asked for: Prometheus answers to the millisecond, other
# backends may not (VictoriaMetrics aligns a range to its step for its cache); a cache or proxy that ignores
# the time asked answers for minutes, hours or days before
TIME_TOLERANCE_SECONDS = 60.0
# A whole answer must arrive within this many timeouts of its request (see PromClient.answer_deadline_seconds)
ANSWER_DEADLINE_TIMEOUTS = 2


class _Sample(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One series of an instant vector of floats (a matrix's ``values`` or a ``histogram`` is refused)."""

    metric: dict[str, str]
    value: tuple[float, str]


class _Data(msgspec.Struct):
    result: list[_Sample]
    result_type: str = msgspec.field(default="", name="resultType")


class _Answer(msgspec.Struct):
    status: str
    data: _Data
    warnings: Any = None


_VECTOR_ANSWER = msgspec.json.Decoder(_Answer)

_Label = Annotated[str, msgspec.Meta(min_length=1)]


class _PodLabels(msgspec.Struct, gc=False):
    """A pod series' key; its other labels are not decoded."""

    namespace: _Label
    pod: _Label


class _PodSample(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    metric: _PodLabels
    value: tuple[float, str]


class _PodData(msgspec.Struct, gc=False):
    result: list[_PodSample]
    result_type: str = msgspec.field(default="", name="resultType")


class _PodAnswer(msgspec.Struct, gc=False):
    status: str
    data: _PodData
    warnings: Any = None


_POD_ANSWER = msgspec.json.Decoder(_PodAnswer)


class _Warned(msgspec.Struct):
    """Only an answer's ``warnings`` (its other fields are skipped)."""

    warnings: Any = None


_WARNINGS = msgspec.json.Decoder(_Warned)


def fast_pod_values(body: bytes, at: float) -> dict[PodKey, float] | None:
    """:func:`by_pod` of a successful instant vector evaluated at ``at`` in which every series names its pod
    once and has a finite, non-negative value; None for anything else (the checked way then says what is
    wrong)."""
    try:
        answer = _POD_ANSWER.decode(body)
        if answer.status != "success" or answer.data.result_type != "vector" or answer.warnings:
            return None
        samples = answer.data.result
        values = {(s.metric.namespace, s.metric.pod): float(s.value[1]) for s in samples}
        stamps = {s.value[0] for s in samples}
    except (msgspec.DecodeError, ValueError):
        return None
    if not all(_same_time(stamp, at) for stamp in stamps):
        return None
    if len(values) != len(samples) or not _finite_and_positive(values.values()):
        return None  # two series for one pod, or an odd value
    return values


def _finite_and_positive(values: Collection[float]) -> bool:
    """Every value finite and >= 0, in two C loops: a NaN or an infinity makes the sum non-finite (so
    does an overflowing sum of finite values, which only sends the caller the checked way)."""
    return not values or (min(values) >= 0.0 and math.isfinite(sum(values)))


class PromClient:
    """One HTTP session to one Prometheus; ``vector()`` evaluates an instant query at a given time.

    Thread-safe for concurrent queries (the history source runs a few at once): the raw answer kept
    for error messages is per thread."""

    def __init__(
        self, settings: PrometheusSettings, timeout_seconds: float | None = None, *, compressed: bool = True
    ) -> None:
        self._settings = settings
        self.url = settings.url.rstrip("/")
        self.shown_url = redact_url(self.url)  # the URL as messages and descriptions show it: no credentials
        self.timeout_seconds = timeout_seconds if timeout_seconds is not None else settings.timeout.total_seconds()
        self._last = threading.local()  # the raw HTTP answer of this thread's last query
        # Our own session: custom_query() returns only data.result and folds HTTP errors into a
        # string, so a response hook keeps the raw answer for Prometheus' own error message.
        self._session = requests.Session()
        self._session.verify = settings.verify_tls  # PrometheusConnect leaves a given session's verify alone
        self._session.hooks["response"].append(self._keep_response)
        if not compressed:  # requests asks for gzip by default: Prometheus then compresses every answer
            self._session.headers["Accept-Encoding"] = "identity"
        self._client: Any = PrometheusConnect(
            url=self.url,
            disable_ssl=not settings.verify_tls,
            # No retries inside a cycle: the library default (3 retries with backoff on 5xx and on
            # read timeouts) would multiply the timeout; the next cycle is the retry.
            retry=Retry(total=0, read=False),
            session=self._session,
            timeout=self.timeout_seconds,
        )

    def close(self) -> None:
        self._session.close()

    def authorize(self) -> None:
        """Reads the bearer token (call once per cycle: projected service-account tokens rotate)."""
        path = self._settings.bearer_token_file
        if path is None:
            return
        try:
            token = read_token_file(path, PROMETHEUS_TOKEN_FILE)
        except TokenFileError as exc:
            raise MetricsUnavailable(str(exc)) from exc
        if any(byte <= 0x20 or byte == 0x7F for byte in token):  # requests would refuse it quoting the token
            raise MetricsUnavailable(
                f"{PROMETHEUS_TOKEN_FILE} {path} holds white space or a control character inside the token (two "
                "lines?): an Authorization header cannot carry it; the token is not shown"
            )
        self._session.headers["Authorization"] = "Bearer " + token.decode("latin-1")  # as http.client sends it

    def vector(self, name: str, promql: str, at: float) -> Vector:
        """The instant vector ``promql`` evaluates to at ``at`` (epoch seconds): (labels, value) pairs."""
        with self._timed(name, at):
            result = self._call(name, promql, self._params(at))
            response: requests.Response | None = self._last.response
            if response is not None:
                try:
                    warnings = _WARNINGS.decode(response.content).warnings
                except msgspec.DecodeError as exc:  # NaN or Infinity, which the library's json module takes
                    raise MetricsMalformed(f"query {name}: HTTP 200 but the body is not JSON: {self._body()}") from exc
                refuse_warnings(name, warnings)
            return parse_vector(name, result, at)

    def large_vector(self, name: str, promql: str, at: float) -> Vector:
        """``vector()`` for answers with many series: the same result and the same errors, decoded faster."""
        with self._timed(name, at):
            return self._vector_from(name, promql, self._fetch(name, promql, at), at)

    def pod_values(self, name: str, promql: str, at: float) -> dict[PodKey, float]:
        """``by_pod(name, large_vector(...))`` for the per-pod answer (150,000 series on the largest cluster),
        decoded straight into (namespace, pod) -> value without a label dict per series; an answer that is
        not a plain vector of distinct, labelled, finite and non-negative values goes the checked way."""
        with self._timed(name, at):
            body = self._fetch(name, promql, at)
            values = fast_pod_values(body, at)
            return values if values is not None else by_pod(name, self._vector_from(name, promql, body, at))

    def pod_matrix(self, name: str, promql: str, start: float, end: float, step: float) -> PodMatrix:
        """The range query ``promql`` from ``start`` to ``end`` every ``step`` seconds, one series per pod,
        strictly checked (:func:`rebalancer.adapters.prom.matrix.pod_matrix`)."""
        params = {
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
            "timeout": f"{self.timeout_seconds:g}s",
        }
        with self._timed(name, end):
            body = self._fetch(name, promql, end, path="query_range", params=params)
            slack = max(step, TIME_TOLERANCE_SECONDS)  # a backend may align the range to its step (its cache)
            return self._matrix_from(name, promql, body, (start - slack, end + slack), one_per_pod=True)

    def pod_samples(self, name: str, promql: str, at: float) -> PodMatrix:
        """The raw samples an instant query over a range selector (``rule{...}[1d]``) returns at ``at``, with
        their own timestamps; a pod may have more than one series (checked like ``pod_matrix`` otherwise)."""
        with self._timed(name, at):
            body = self._fetch(name, promql, at)  # the samples of the range selector's span, up to ``at``
            return self._matrix_from(name, promql, body, (-math.inf, at + TIME_TOLERANCE_SECONDS), one_per_pod=False)

    def _matrix_from(
        self, name: str, promql: str, body: bytes, span: tuple[float, float], *, one_per_pod: bool
    ) -> PodMatrix:
        try:
            return pod_matrix(name, body, span=span, one_per_pod=one_per_pod)
        except MetricsMalformed:
            answer = self._json()
            if isinstance(answer, dict) and answer.get("status") == "error":
                raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {clip(promql)}") from None
            raise

    def _fetch(
        self, name: str, promql: str, at: float, *, path: str = "query", params: Mapping[str, str] | None = None
    ) -> bytes:
        """The body of a 200 answer, fetched on the same session as ``custom_query`` would. A long query (a
        filter naming many nodes) goes in a form-encoded POST body, as Prometheus' API allows: proxies in
        front of it commonly refuse request lines of over 4-8 KB."""
        fields = {"query": promql, **(params if params is not None else self._params(at))}
        url = f"{self.url}/api/v1/{path}"
        # verify given with each request, as the library gives it: requests would let a CA bundle named in the
        # environment (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) override the session's verifyTls: false
        timeout, verify = self.timeout_seconds, self._session.verify
        with self._transport_errors(name):
            if len(promql) > LONG_QUERY_CHARS:
                response = self._session.post(url, data=fields, timeout=timeout, verify=verify)
            else:
                response = self._session.get(url, params=fields, timeout=timeout, verify=verify)
        if response.status_code != 200:  # the cause custom_query would have raised
            cause = PrometheusApiClientException(f"HTTP Status Code {response.status_code} ({response.content!r})")
            raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {clip(promql)}") from cause
        return response.content

    def _vector_from(self, name: str, promql: str, body: bytes, at: float) -> Vector:
        try:
            answer = _VECTOR_ANSWER.decode(body)
        except msgspec.ValidationError:  # valid JSON, but not a plain vector of floats: say what it is
            return parse_vector(name, self._data_result(name, promql), at)
        except msgspec.DecodeError as exc:
            raise MetricsMalformed(f"query {name}: HTTP 200 but the body is not JSON: {self._body()}") from exc
        if answer.status != "success" or answer.data.result_type != "vector":
            return parse_vector(name, self._data_result(name, promql), at)
        refuse_warnings(name, answer.warnings)
        return [(s.metric, _value(name, s.metric, list(s.value), at)) for s in answer.data.result]

    def _params(self, at: float) -> dict[str, str]:
        return {"time": f"{at:.3f}", "timeout": f"{self.timeout_seconds:g}s"}

    @property
    def answer_deadline_seconds(self) -> float:
        """How long a whole answer may take from its request: the evaluation Prometheus is allowed (the
        timeout), then as long again to send the answer."""
        return ANSWER_DEADLINE_TIMEOUTS * self.timeout_seconds

    @contextlib.contextmanager
    def _timed(self, name: str, at: float) -> Iterator[None]:
        started = time.monotonic()
        self._last.response = None
        self._last.deadline = AnswerDeadline(started + self.answer_deadline_seconds)
        try:
            yield
        except (MetricsUnavailable, MetricsMalformed) as exc:  # a failed read, or an answer ended by the
            if self._last.deadline.cut:  # connection (no length, not chunked) that reads as cut short
                raise self._cut_off(name) from exc
            raise
        finally:
            self._last.deadline.disarm()
            self._last.response = None  # do not keep a large answer alive between cycles
        _log.debug("query %s at %s took %.3fs", name, iso(at), time.monotonic() - started)

    @contextlib.contextmanager
    def _transport_errors(self, name: str) -> Iterator[None]:
        try:
            yield
        except requests.RequestException as exc:  # one the deadline cut: _timed says so
            raise self._transport_error(name, exc) from exc

    def _cut_off(self, name: str) -> MetricsUnavailable:
        return MetricsUnavailable(
            f"query {name}: Prometheus at {self.shown_url} did not finish its answer within "
            f"{self.answer_deadline_seconds:g}s (twice prometheus.timeout); it was cut off"
        )

    def _transport_error(self, name: str, exc: requests.RequestException) -> MetricsUnavailable:
        where = f"Prometheus at {self.shown_url}"
        if isinstance(exc, requests.Timeout):
            return MetricsUnavailable(f"query {name}: {where} did not answer within {self.timeout_seconds:g}s")
        if isinstance(exc, requests.ConnectionError):
            if exc.args and isinstance(exc.args[0], ReadTimeoutError):  # what requests makes of a stalled body
                return MetricsUnavailable(
                    f"query {name}: {where} stopped sending its answer: nothing came for {self.timeout_seconds:g}s"
                )
            return MetricsUnavailable(f"query {name}: cannot reach {where}: {exc}")
        return MetricsUnavailable(f"query {name}: request to {where} failed: {exc}")

    def _call(self, name: str, promql: str, params: Mapping[str, str]) -> object:
        with self._transport_errors(name):
            try:
                result: object = self._client.custom_query(promql, params=dict(params))
            except requests.JSONDecodeError as exc:
                raise MetricsMalformed(f"query {name}: HTTP 200 but the body is not JSON: {self._body()}") from exc
            except PrometheusApiClientException as exc:
                raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {clip(promql)}") from exc
            except requests.RequestException:  # some are ValueErrors too (MissingSchema, InvalidURL)
                raise
            except (KeyError, TypeError, ValueError) as exc:  # HTTP 200, but no data.result in the body
                return self._data_result(name, promql, exc)
        return result

    def _data_result(self, name: str, promql: str, cause: Exception | None = None) -> object:
        """``data.result`` of the last answer, or the error an HTTP 200 without it stands for."""
        answer = self._json()
        if isinstance(answer, dict) and answer.get("status") == "error":
            raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {clip(promql)}") from cause
        data = answer.get("data") if isinstance(answer, dict) else None
        if isinstance(answer, dict):
            refuse_warnings(name, answer.get("warnings"))
        if not isinstance(data, dict) or "result" not in data:
            raise MetricsMalformed(f"query {name}: the answer has no data.result: {self._body()}") from cause
        result: object = data["result"]
        return result

    def _keep_response(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        """The session's response hook: runs on the headers, before the body is read."""
        self._last.response = response
        deadline: AnswerDeadline | None = getattr(self._last, "deadline", None)
        if deadline is not None:
            deadline.arm(response)

    def _http_error(self) -> str:
        response: requests.Response | None = self._last.response
        if response is None:
            return "Prometheus answered with an error"
        answer = self._json()
        if isinstance(answer, dict) and "error" in answer:
            return (
                f"Prometheus answered HTTP {response.status_code} ({answer.get('errorType', '?')}): {answer['error']}"
            )
        return f"Prometheus answered HTTP {response.status_code}: {self._body()}"

    def _json(self) -> object:
        response: requests.Response | None = self._last.response
        if response is None:
            return None
        try:
            return response.json()
        except ValueError:  # requests.JSONDecodeError is a ValueError
            return None

    def _body(self) -> str:
        response: requests.Response | None = self._last.response
        return "" if response is None else clip(response.text)


def parse_vector(name: str, result: object, at: float) -> Vector:
    """Checks the shape of ``data.result`` (the Prometheus HTTP API) of a query evaluated at ``at`` and
    returns (labels, value) pairs.

    ``custom_query`` hands back only ``data.result``; the shapes still tell the result types apart:
    a vector is a list of ``{"metric", "value"}``, a matrix a list of ``{"metric", "values"}``, a
    scalar or string a bare ``[time, "text"]`` pair.
    """
    if not isinstance(result, list):
        raise MetricsMalformed(f"query {name}: expected an instant vector, got {clip(repr(result))}")
    if len(result) == 2 and isinstance(result[0], int | float) and isinstance(result[1], str):
        raise MetricsMalformed(
            f"query {name}: expected an instant vector, got a scalar or string ({result[1]!r}); "
            "the query must return one series per key"
        )
    series: Vector = []
    for item in result:
        if not isinstance(item, dict):
            raise MetricsMalformed(f"query {name}: expected an instant vector, got an element {clip(repr(item))}")
        labels = item.get("metric")
        if "values" in item or "histograms" in item:
            raise MetricsMalformed(f"query {name}: expected an instant vector, got a range vector (matrix)")
        if "histogram" in item:
            raise MetricsMalformed(f"query {name}: native histogram sample, expected a float: {show(labels)}")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise MetricsMalformed(f"query {name}: a series has no label set: {clip(repr(item))}")
        series.append((labels, _value(name, labels, item.get("value"), at)))
    return series


def by_node(name: str, series: Vector, label: str) -> dict[str, float]:
    """One value per node (the ``label`` label); a series without it, or a second one, is malformed."""
    out: dict[str, float] = {}
    for labels, value in series:
        node = labels.get(label)
        if not node:
            raise MetricsMalformed(f"query {name}: a series has no {label!r} label: {show(labels)}")
        if node in out:
            raise MetricsMalformed(f"query {name}: more than one series for node {node!r}: {show(labels)}")
        out[node] = value
    return out


def by_pod(name: str, series: Vector) -> dict[PodKey, float]:
    """One value per (namespace, pod); a series without both labels, or a second one, is malformed."""
    out: dict[PodKey, float] = {}
    for labels, value in series:
        namespace, pod = labels.get("namespace"), labels.get("pod")
        if not namespace or not pod:
            missing = "namespace" if not namespace else "pod"
            raise MetricsMalformed(f"query {name}: a series has no {missing!r} label: {show(labels)}")
        if (namespace, pod) in out:
            raise MetricsMalformed(f"query {name}: more than one series for pod {namespace}/{pod}: {show(labels)}")
        out[namespace, pod] = value
    return out


def _value(name: str, labels: Labels, pair: object, at: float) -> float:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise MetricsMalformed(f"query {name}: series {show(labels)} has no [time, value] pair: {clip(repr(pair))}")
    try:
        value = float(pair[1])
    except ValueError as exc:
        raise MetricsMalformed(f"query {name}: series {show(labels)} has an unparsable value {pair[1]!r}") from exc
    if not math.isfinite(value):
        raise MetricsMalformed(f"query {name}: series {show(labels)} has the value {pair[1]}")
    if value < 0:
        raise MetricsMalformed(f"query {name}: series {show(labels)} has a negative value {pair[1]}")
    if not _same_time(pair[0], at):
        raise MetricsMalformed(
            f"query {name}: series {show(labels)} is for the time {clip(repr(pair[0]))}, not {at:.3f} ({iso(at)}) "
            "the query was evaluated at: an answer for another time (from a cache or proxy that ignores the "
            "query's time?) is not used"
        )
    return value


def _same_time(stamp: object, at: float) -> bool:
    """Whether a sample's time is ``at`` as the query sent it, within :data:`TIME_TOLERANCE_SECONDS`."""
    return isinstance(stamp, int | float) and not isinstance(stamp, bool) and abs(stamp - at) <= TIME_TOLERANCE_SECONDS


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def show(labels: object) -> str:
    if not isinstance(labels, dict):
        return clip(repr(labels))
    return clip("{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}")


def clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
