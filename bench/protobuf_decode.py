"""The client's CPU to read pods as protobuf (``application/vnd.kubernetes.protobuf``) against JSON.

    .venv/bin/python -m bench.protobuf_decode [pods,...] [runs]     # default 30000,150000 and 5 runs

The same pods of :mod:`bench.cluster_gen` (managedFields, env, probes, ... as served) as pages of 500, in
JSON as the test API server serves them and in the Kubernetes protobuf encoding (:mod:`bench.k8s_protobuf`),
held in memory and decoded with no server in the way. Each path turns every page into the same domain pods
(checked), with the collector paused as a snapshot pauses it:

- ``json``: the shipping path, msgspec's narrow structs, each pod converted as soon as it is decoded
  (``PodDecoder.converting_list``); ``json decode only``: the same structs, not converted, each page's
  dropped once decoded;
- ``upb``: the shipping protobuf path (:mod:`rebalancer.adapters.kube.protobuf_lists`): a narrow message set
  built at run time (only the fields the snapshot reads, with the API's field numbers; every other field is
  skipped in C by the ``protobuf`` package's upb backend), each pod's message copied into the same narrow
  structs and converted by the same ``PodDecoder.pod`` as it is built (the parts a template sets read once
  per distinct encoding); ``upb parse only``: the C parse;
- ``python``: a hand-written pure-Python wire decoder straight into the narrow structs (unread fields
  skipped by their length), then ``PodDecoder.pod``.

Prints, per size, the median CPU seconds of ``runs`` rounds (paths alternating in each round), the ratio of
each to ``json``, and the bytes of the two encodings; then the client CPU to receive pages of the same
sizes over loopback through urllib3 (as the official client receives a page; a server process sends
them), and each protobuf path's decoding plus its transfer against JSON's.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench import cluster_gen, k8s_protobuf
from rebalancer.adapters.kube import decode, protobuf_lists, wire
from rebalancer.app.collector import paused as collector_paused
from rebalancer.domain.model import Pod
from rebalancer.planning.protections import MIRROR_ANNOTATION

PAGE = 500
ANNOTATIONS = frozenset({"descheduler.alpha.kubernetes.io/evict", "controller.kubernetes.io/pod-deletion-cost"})


# --- the pages -----------------------------------------------------------------------------------


def _filled(value: Any, fillers: dict[str, str]) -> Any:
    """``value`` with each placeholder of :func:`cluster_gen.pod_bytes`'s template replaced by its filler."""
    if isinstance(value, str):
        for placeholder, filler in fillers.items():
            value = value.replace(placeholder, filler)
        return value
    if isinstance(value, dict):
        return {key: _filled(item, fillers) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, fillers) for item in value]
    return value


_TEMPLATES: dict[tuple[int, tuple[int, ...]], bytes] = {}


def pod_protobuf(i: int, node_count: int) -> bytes:
    """The protobuf of the pod whose JSON is ``cluster_gen.pod_bytes(i, node_count)``, as fast.

    Made the same way: one encoding per template (and length of the varying values), the values put in
    for fillers of their length (a protobuf string's length is written ahead of it).
    """
    namespace, name, _ = cluster_gen.pod_bytes(i, 1)  # (cheap: the template is cached)
    values = (
        name,
        namespace,
        f"svc-{(i // 7) % 2000:04d}",
        f"node-{(i * 7919) % node_count:05d}",
        f"{i:012d}",
        f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
    )
    lengths = tuple(map(len, values))
    key = (i % 20, lengths)
    template = _TEMPLATES.get(key)
    if template is None:
        fillers = {
            p: chr(1 + mark) * n for mark, (p, n) in enumerate(zip(cluster_gen._PLACEHOLDERS, lengths, strict=True))
        }
        pod = _filled(msgspec.json.decode(cluster_gen._template(i % 20)), fillers)
        template = _TEMPLATES[key] = k8s_protobuf.message("Pod", pod)
    out = template
    for mark, value in enumerate(values):
        out = out.replace(chr(1 + mark).encode() * lengths[mark], value.encode())
    return out


def json_page(items: list[bytes], continue_token: str) -> bytes:
    meta = msgspec.json.encode({"resourceVersion": "1000", "continue": continue_token} if continue_token else {})
    return b'{"kind":"PodList","apiVersion":"v1","metadata":' + meta + b',"items":[' + b",".join(items) + b"]}"


def pages(count: int, node_count: int) -> tuple[list[bytes], list[bytes]]:
    """(JSON pages, protobuf pages) of the first ``count`` pods of a ``node_count``-node cluster."""
    json_pages, proto_pages = [], []
    for start in range(0, count, PAGE):
        stop = min(count, start + PAGE)
        token = f"page-{stop}" if stop < count else ""
        json_pages.append(json_page([cluster_gen.pod_bytes(i, node_count)[2] for i in range(start, stop)], token))
        meta = {"resourceVersion": "1000", "continue": token} if token else {}
        proto_pages.append(
            k8s_protobuf.list_body("Pod", meta, [pod_protobuf(i, node_count) for i in range(start, stop)])
        )
    return json_pages, proto_pages


# --- the pure-Python wire decoder -----------------------------------------------------------------


class ProtobufError(ValueError):
    """A body that is not the protobuf it claims to be; the message names the field path."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path, self.problem = path, problem

    def inside(self, name: str) -> ProtobufError:
        return ProtobufError(f"{name}.{self.path}" if self.path else name, self.problem)


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ProtobufError("", "truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("", "varint longer than 10 bytes")


def _skip(buf: bytes, pos: int, end: int, tag: int) -> int:
    wire_type = tag & 7
    if wire_type == 0:
        return _varint(buf, pos, end)[1]
    if wire_type == 2:
        length, pos = _varint(buf, pos, end)
        stop = pos + length
    elif wire_type == 1:
        stop = pos + 8
    elif wire_type == 5:
        stop = pos + 4
    else:
        raise ProtobufError(f"#{tag >> 3}", f"unknown wire type {wire_type}")
    if stop > end:
        raise ProtobufError(f"#{tag >> 3}", "truncated field")
    return stop


# Kinds of a read field.
STRING, INT, BOOL, MESSAGE, REPEATED, STRINGS, MAP, PRESENT, TIME, QUANTITIES = range(10)
_LENGTH_DELIMITED = {STRING, MESSAGE, REPEATED, STRINGS, MAP, PRESENT, TIME, QUANTITIES}


class Message:
    """How one narrow message is read: its fields by number, and what the values are built into."""

    def __init__(self, build: Callable[..., Any], fields: dict[int, tuple[str, int, Any]]) -> None:
        self.build = build
        self.fields = {
            number << 3 | (2 if kind in _LENGTH_DELIMITED else 0): (name, kind, sub)
            for number, (name, kind, sub) in fields.items()
        }

    def read(self, buf: bytes, pos: int, end: int) -> Any:  # noqa: PLR0915 - the inner loop, kept inline
        values: dict[str, Any] = {}
        fields = self.fields
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag > 0x7F:
                rest, pos = _varint(buf, pos, end)
                tag = (tag & 0x7F) | rest << 7
            field = fields.get(tag)
            if field is None:
                pos = _skip(buf, pos, end, tag)
                continue
            name, kind, sub = field
            try:
                if tag & 7 == 0:
                    value, pos = _varint(buf, pos, end)
                    values[name] = bool(value) if kind == BOOL else (value - (1 << 64) if value >> 63 else value)
                    continue
                length = buf[pos]
                pos += 1
                if length > 0x7F:
                    rest, pos = _varint(buf, pos, end)
                    length = (length & 0x7F) | rest << 7
                stop = pos + length
                if stop > end:
                    raise ProtobufError("", "truncated field")
                if kind == STRING:
                    values[name] = buf[pos:stop].decode()
                elif kind == REPEATED:
                    item = sub.read(buf, pos, stop)
                    if name in values:
                        values[name].append(item)
                    else:
                        values[name] = [item]
                elif kind in (MESSAGE, TIME):
                    values[name] = sub.read(buf, pos, stop)
                elif kind == STRINGS:
                    text = buf[pos:stop].decode()
                    if name in values:
                        values[name].append(text)
                    else:
                        values[name] = [text]
                elif kind in (MAP, QUANTITIES):
                    entry_key, entry_value = _entry(buf, pos, stop, kind == QUANTITIES)
                    if name in values:
                        values[name][entry_key] = entry_value
                    else:
                        values[name] = {entry_key: entry_value}
                else:  # PRESENT
                    values[name] = _PRESENT
            except ProtobufError as exc:
                raise exc.inside(name) from None
            except UnicodeDecodeError:
                raise ProtobufError(name, "not UTF-8") from None
            pos = stop
        return self.build(**values)


_PRESENT = wire.Present()


def _entry(buf: bytes, pos: int, end: int, quantity: bool) -> tuple[str, str]:
    """A map entry {key=1, value=2}: the value a string, or a resource.Quantity {string=1}."""
    key = value = ""
    while pos < end:
        tag = buf[pos]
        pos += 1
        if tag not in (10, 18):
            pos = _skip(buf, pos, end, tag)
            continue
        length, pos = _varint(buf, pos, end)
        stop = pos + length
        if stop > end:
            raise ProtobufError("", "truncated map entry")
        if tag == 10:
            key = buf[pos:stop].decode()
        elif quantity:
            value = _entry(buf, pos, stop, False)[0]  # Quantity {string=1}: read as an entry's key
        else:
            value = buf[pos:stop].decode()
        pos = stop
    return key, value


def _time(seconds: int = 0, nanos: int = 0) -> str:
    """A meta/v1 Time as the RFC 3339 text JSON carries (whole seconds: JSON's Time drops the nanos)."""
    return protobuf_lists.time_text(seconds)


def _tuples(struct: type[Any], names: tuple[str, ...]) -> Callable[..., Any]:
    """A builder of ``struct`` that turns the repeated fields ``names`` into tuples (hashable keys)."""

    def build(**values: Any) -> Any:
        for name in names:
            if name in values:
                values[name] = tuple(values[name])
        return struct(**values)

    return build


def _resource_list(entries: dict[str, str]) -> wire.Quantities:
    return wire.Quantities(cpu=entries.get("cpu"), memory=entries.get("memory"))


def _resources(**values: Any) -> wire.ResourceRequirements:
    requests, limits = values.get("requests"), values.get("limits")
    return wire.ResourceRequirements(
        requests=None if requests is None else _resource_list(requests),
        limits=None if limits is None else _resource_list(limits),
    )


def _volume(**values: Any) -> wire.Volume:
    found: wire.Volume = values.get("source", _NO_VOLUME)
    return found


_NO_VOLUME = wire.Volume()


def _pod_rules_text(required: Any = (), preferred: Any = ()) -> msgspec.Raw:
    """A podAffinity or podAntiAffinity as the JSON text the wire struct keeps (see ``wire.Affinity``)."""
    rules = {
        "requiredDuringSchedulingIgnoredDuringExecution": list(required),
        "preferredDuringSchedulingIgnoredDuringExecution": list(preferred),
    }
    return msgspec.Raw(msgspec.json.encode(rules))


def python_decoder(pod_wire: wire.PodWire) -> Message:
    """The pure-Python reader of a PodList's raw bytes, building ``pod_wire``'s narrow structs."""
    requirement = Message(
        _tuples(wire.SelectorRequirement, ("values",)),
        {1: ("key", STRING, None), 2: ("operator", STRING, None), 3: ("values", STRINGS, None)},
    )
    term = Message(
        _tuples(wire.NodeSelectorTerm, ("match_expressions", "match_fields")),
        {1: ("match_expressions", REPEATED, requirement), 2: ("match_fields", REPEATED, requirement)},
    )
    node_selector = Message(
        _tuples(wire.NodeSelector, ("node_selector_terms",)), {1: ("node_selector_terms", REPEATED, term)}
    )
    preferred = Message(wire.PreferredSchedulingTerm, {1: ("weight", INT, None), 2: ("preference", MESSAGE, term)})
    node_affinity = Message(
        _tuples(wire.NodeAffinity, ("preferred_during_scheduling_ignored_during_execution",)),
        {
            1: ("required_during_scheduling_ignored_during_execution", MESSAGE, node_selector),
            2: ("preferred_during_scheduling_ignored_during_execution", REPEATED, preferred),
        },
    )
    requirement_json = Message(
        lambda key="", operator="", values=(): {"key": key, "operator": operator, "values": list(values)},
        {1: ("key", STRING, None), 2: ("operator", STRING, None), 3: ("values", STRINGS, None)},
    )
    selector_json = Message(
        lambda match_labels=None, match_expressions=(): {
            "matchLabels": match_labels or {},
            "matchExpressions": list(match_expressions),
        },
        {1: ("match_labels", MAP, None), 2: ("match_expressions", REPEATED, requirement_json)},
    )
    pod_term = Message(
        lambda label_selector=None, namespaces=(), topology_key="": {
            "labelSelector": label_selector,
            "namespaces": list(namespaces),
            "topologyKey": topology_key,
        },
        {
            1: ("label_selector", MESSAGE, selector_json),
            2: ("namespaces", STRINGS, None),
            3: ("topology_key", STRING, None),
        },
    )
    weighted_term = Message(
        lambda weight=0, term=None: {"weight": weight, "podAffinityTerm": term},
        {1: ("weight", INT, None), 2: ("term", MESSAGE, pod_term)},
    )
    pod_rules = Message(
        _pod_rules_text, {1: ("required", REPEATED, pod_term), 2: ("preferred", REPEATED, weighted_term)}
    )
    affinity = Message(
        wire.Affinity,
        {
            1: ("node_affinity", MESSAGE, node_affinity),
            2: ("pod_affinity", MESSAGE, pod_rules),
            3: ("pod_anti_affinity", MESSAGE, pod_rules),
        },
    )
    resources = Message(_resources, {1: ("limits", QUANTITIES, None), 2: ("requests", QUANTITIES, None)})
    container = Message(wire.Container, {8: ("resources", MESSAGE, resources), 24: ("restart_policy", STRING, None)})
    toleration = Message(
        wire.WireToleration,
        {
            1: ("key", STRING, None),
            2: ("operator", STRING, None),
            3: ("value", STRING, None),
            4: ("effect", STRING, None),
        },
    )
    kinds = {
        json_name: attribute
        for attribute, json_name in zip(
            wire.Volume.__struct_fields__, wire.Volume.__struct_encode_fields__, strict=True
        )
    }
    source = Message(
        wire.Volume,
        {
            number: (kinds[json_name], PRESENT, None)
            for json_name, (number, _) in k8s_protobuf.SCHEMA["VolumeSource"].items()
        },
    )
    volume = Message(_volume, {2: ("source", MESSAGE, source)})
    spec_tuples = _tuples(wire.PodSpec, ("containers", "init_containers", "tolerations", "volumes"))

    def pod_spec(**values: Any) -> wire.PodSpec:
        if "overhead" in values:
            values["overhead"] = _resource_list(values["overhead"])
        return spec_tuples(**values)  # type: ignore[no-any-return]

    spec = Message(
        pod_spec,
        {
            1: ("volumes", REPEATED, volume),
            2: ("containers", REPEATED, container),
            7: ("node_selector", MAP, None),
            10: ("node_name", STRING, None),
            18: ("affinity", MESSAGE, affinity),
            20: ("init_containers", REPEATED, container),
            22: ("tolerations", REPEATED, toleration),
            24: ("priority_class_name", STRING, None),
            25: ("priority", INT, None),
            32: ("overhead", QUANTITIES, None),
            40: ("resources", MESSAGE, resources),
        },
    )
    condition = Message(wire.Condition, {1: ("type", STRING, None), 2: ("status", STRING, None)})
    container_status = Message(wire.ContainerStatus, {5: ("restart_count", INT, None)})
    status = Message(
        wire.PodStatus,
        {
            1: ("phase", STRING, None),
            2: ("conditions", REPEATED, condition),
            8: ("container_statuses", REPEATED, container_status),
            9: ("qos_class", STRING, None),
        },
    )
    owner = Message(
        wire.OwnerReference, {1: ("kind", STRING, None), 3: ("name", STRING, None), 6: ("controller", BOOL, None)}
    )
    time_message = Message(_time, {1: ("seconds", INT, None), 2: ("nanos", INT, None)})
    annotations_type = type(pod_wire.no_annotations)
    meta_type = type(pod_wire.pod_type().metadata)
    kept = {key: attribute for attribute, key in pod_wire.keys}
    mirror_key = MIRROR_ANNOTATION

    def meta(**values: Any) -> Any:
        annotations = values.pop("annotations", None)
        if annotations:
            found = {kept[k]: v for k, v in annotations.items() if k in kept}
            if mirror_key in annotations and pod_wire.mirror not in found:
                found[pod_wire.mirror] = msgspec.Raw(b'""')
            values["annotations"] = annotations_type(**found) if found else pod_wire.no_annotations
        return meta_type(**values)

    metadata = Message(
        meta,
        {
            1: ("name", STRING, None),
            3: ("namespace", STRING, None),
            5: ("uid", STRING, None),
            8: ("creation_timestamp", TIME, time_message),
            9: ("deletion_timestamp", TIME, time_message),
            11: ("labels", MAP, None),
            12: ("annotations", MAP, None),
            13: ("owner_references", REPEATED, owner),
        },
    )
    return Message(
        pod_wire.pod_type,
        {1: ("metadata", MESSAGE, metadata), 2: ("spec", MESSAGE, spec), 3: ("status", MESSAGE, status)},
    )


def unwrap(body: bytes) -> tuple[int, int]:
    """(start, end) of the object inside a protobuf body: the magic, then runtime.Unknown's raw=2."""
    if body[:4] != k8s_protobuf.MAGIC:
        raise ProtobufError("", "not a Kubernetes protobuf body (no k8s magic)")
    pos, end = 4, len(body)
    raw = None
    while pos < end:
        tag, pos = _varint(body, pos, end)
        if tag == 18:
            length, pos = _varint(body, pos, end)
            raw = (pos, pos + length)
            pos += length
        else:
            pos = _skip(body, pos, end, tag)
    if raw is None or raw[1] > end:
        raise ProtobufError("raw", "missing or truncated")
    return raw


def python_pods(body: bytes, pod: Message, convert: Callable[[Any], Pod], out: list[Pod]) -> str:
    """The pods of a PodList body appended to ``out``, each converted as soon as read; the continue token."""
    pos, end = unwrap(body)
    token = ""
    while pos < end:
        tag, pos = _varint(body, pos, end)
        length, pos = _varint(body, pos, end)
        stop = pos + length
        if tag == 18:
            try:
                out.append(convert(pod.read(body, pos, stop)))
            except ProtobufError as exc:
                raise exc.inside(f"items[{len(out)}]") from None
        elif tag == 10:
            list_meta = _LIST_META.read(body, pos, stop)
            token = list_meta.continue_
        pos = stop
    return token


_LIST_META = Message(
    wire.ListMeta,
    {2: ("resource_version", STRING, None), 3: ("continue_", STRING, None), 4: ("remaining_item_count", INT, None)},
)


# --- the measurement -----------------------------------------------------------------------------


def _json(json_pages: list[bytes]) -> list[Pod]:
    out: list[Pod] = []
    with decode.PodDecoder(ANNOTATIONS, {}).converting_list() as pod_list:
        for page in json_pages:
            out.extend(decode.converted(pod_list.decode(page).items))
    return out


def _json_decode_only(json_pages: list[bytes]) -> list[Any]:
    pod_list = decode.pod_wire(ANNOTATIONS).pod_list
    return [len(pod_list.decode(page).items) for page in json_pages]  # each page's structs dropped at once


def _upb(proto_pages: list[bytes]) -> list[Pod]:
    """The shipping protobuf path (:class:`protobuf_lists.PodLists`), each pod converted as it is built."""
    pod_decoder = decode.PodDecoder(ANNOTATIONS, {})
    out: list[Pod] = []
    with pod_decoder.converting_list() as pod_list:
        reader = protobuf_lists.PodLists(pod_decoder.wire, pod_list)
        for page in proto_pages:
            out.extend(decode.converted(reader("pods", page).items))
    return out


def _upb_parse_only(proto_pages: list[bytes]) -> list[Any]:
    return [len(protobuf_lists.parse("pods", "PodList", page).items) for page in proto_pages]


def _python(proto_pages: list[bytes]) -> list[Pod]:
    pod_decoder = decode.PodDecoder(ANNOTATIONS, {})
    pod = python_decoder(pod_decoder.wire)
    out: list[Pod] = []
    for page in proto_pages:
        python_pods(page, pod, pod_decoder.pod, out)
    return out


PATHS: dict[str, tuple[str, Callable[[list[bytes]], list[Any]]]] = {
    "json": ("json", _json),
    "json decode only": ("json", _json_decode_only),
    "upb": ("protobuf", _upb),
    "upb parse only": ("protobuf", _upb_parse_only),
    "python": ("protobuf", _python),
}


def _timed(run: Callable[[list[bytes]], list[Any]], data: list[bytes]) -> tuple[float, float]:
    gc.collect()
    with collector_paused():
        cpu, wall = time.process_time(), time.perf_counter()
        result = run(data)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        del result
    return cpu, wall


# --- the transfer: the bytes received over loopback, as the official client receives a page --------


def serve(largest: int) -> None:
    """``--serve LARGEST``: answer ``GET /<n>`` with ``n`` bytes (at most ``largest``) on a loopback port
    printed on the first line, until standard input closes."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = memoryview(b"x" * largest)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            size = int(self.path.strip("/"))
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(body[:size])

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


def _received(pool: Any, url: str, sizes: list[int]) -> float:
    """The client CPU to receive pages of ``sizes`` bytes (``response.data``, as the lister reads a page)."""
    cpu = time.process_time()
    for size in sizes:
        response = pool.request("GET", f"{url}/{size}", preload_content=False)
        try:
            if len(response.data) != size:
                raise SystemExit(f"short page: {size} bytes asked")
        finally:
            response.release_conn()
    return time.process_time() - cpu


def transfer(json_pages: list[bytes], proto_pages: list[bytes], runs: int) -> tuple[float, float]:
    """Median client CPU seconds to receive the JSON pages and the protobuf pages over loopback."""
    import subprocess

    import urllib3

    largest = max(map(len, json_pages + proto_pages))
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.protobuf_decode", "--serve", str(largest)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        pool = urllib3.PoolManager()
        sizes = {"json": [len(p) for p in json_pages], "protobuf": [len(p) for p in proto_pages]}
        cpus: dict[str, list[float]] = {"json": [], "protobuf": []}
        for round_ in range(runs):
            for name in ("json", "protobuf") if round_ % 2 == 0 else ("protobuf", "json"):
                cpus[name].append(_received(pool, url, sizes[name]))
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=30)
    return statistics.median(cpus["json"]), statistics.median(cpus["protobuf"])


def measure(count: int, runs: int) -> None:
    node_count = max(1, count // 30)
    started = time.perf_counter()
    json_pages, proto_pages = pages(count, node_count)
    data = {"json": json_pages, "protobuf": proto_pages}
    json_bytes, proto_bytes = sum(map(len, json_pages)), sum(map(len, proto_pages))
    print(
        f"{count:,} pods in {len(json_pages)} pages (made in {time.perf_counter() - started:.0f} s): "
        f"JSON {json_bytes / 1e6:,.0f} MB, protobuf {proto_bytes / 1e6:,.0f} MB ({proto_bytes / json_bytes:.2f}x)"
    )
    expected = _json(json_pages)
    for name in ("upb", "python"):
        if name not in PATHS:
            continue
        got = PATHS[name][1](proto_pages)
        if got != expected:
            bad = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
            raise SystemExit(f"{name}: pod {bad} differs from JSON's:\n{got[bad]}\n{expected[bad]}")
    del expected
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in PATHS}
    for round_ in range(runs):
        order = list(PATHS) if round_ % 2 == 0 else list(reversed(PATHS))
        for name in order:
            encoding, run = PATHS[name]
            figures[name].append(_timed(run, data[encoding]))
    medians = {name: statistics.median(cpu for cpu, _ in values) for name, values in figures.items()}
    base = medians["json"]
    print(f"  client CPU to decode, median of {runs} (min-max), and its ratio to the JSON path:")
    for name, values in figures.items():
        cpus = [cpu for cpu, _ in values]
        print(
            f"    {name:17s} {medians[name]:6.2f} s ({min(cpus):.2f}-{max(cpus):.2f}) "
            f"{medians[name] / count * 1e6:6.1f} us/pod  {medians[name] / base:5.2f}x"
        )
    json_transfer, proto_transfer = transfer(json_pages, proto_pages, runs)
    print(
        f"  client CPU to receive the pages over loopback (urllib3), median of {runs}: "
        f"JSON {json_transfer:.2f} s, protobuf {proto_transfer:.2f} s ({proto_transfer / json_transfer:.2f}x)"
    )
    json_read = base + json_transfer
    for name in ("upb", "python"):
        if name in medians:
            read = medians[name] + proto_transfer
            print(f"  received and decoded: json {json_read:.2f} s, {name} {read:.2f} s ({read / json_read:.2f}x)")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--serve"]:
        serve(int(argv[1]))
        return
    sizes = [int(s) for s in (argv[0] if argv else "30000,150000").split(",")]
    runs = int(argv[1]) if len(argv) > 1 else 5
    for count in sizes:
        measure(count, runs)


if __name__ == "__main__":
    main(sys.argv[1:])
