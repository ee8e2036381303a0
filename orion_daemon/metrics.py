"""The daemon's Prometheus metrics: `orion up --metrics-port` / `--metrics-listen`.

Fleets are watched with Prometheus, so a daemon can serve what `orion status --json` shows in
Prometheus's text format, for a scraper to graph and alert on over weeks. One source of truth:
the metrics are built, at each scrape, from the very dictionary ``status --json`` prints
(:meth:`orion_daemon.server.Daemon.snapshot`), by a collector of our own rather than by
counters kept beside it, so the two never disagree and a client that has gone (no longer in the
snapshot) has no series left. prometheus-client writes the text format.

Serving never holds the daemon up: the HTTP server has threads of its own (one per scrape, a
bounded number at once, each with a socket deadline), a scrape holds the daemon's state lock
only while the snapshot is taken (as `orion status` does), and the heartbeat takes no lock at
all, so a scraper that connects and never reads costs one thread until its deadline and
nothing else.

The address is loopback unless the operator says otherwise (``--metrics-allow-remote``): the
metrics name every client's program and memory, which other hosts have no need to see.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from orion_common.errors import OrionError, UsageError
from orion_daemon.status import HELD_REASONS

LOOPBACK = "127.0.0.1"
"""Where ``--metrics-port`` alone listens."""
SCRAPE_DEADLINE_S = 10.0
"""How long one scrape's connection may take to send its request and read the answer before it
is dropped (a scrape's answer is a few kilobytes)."""
MAX_SCRAPES = 8
"""Scrapes served at once; one over the bound is hung up on at once (Prometheus scrapes a target
once per interval, so more than a few at a time is a client gone wrong)."""
CLIENT_EVENTS = ("join", "leave", "dead", "expired", "refused")
"""What ``clients.csv`` records of clients (:data:`orion_daemon.state.CLIENT_EVENT_COLUMNS`),
counted in ``orion_client_events_total{event=...}``."""
REQUEST_OPS = ("join", "check", "status", "learned", "quota", "down", "record", "record_end")
"""The requests timed by name; anything else counts as ``other`` (bounded label values)."""


@dataclass(frozen=True)
class MetricsAddress:
    """Where the metrics are served: a host (an IP address or a name) and a TCP port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self}/metrics"


def parse_address(text: str, *, allow_remote: bool = False) -> MetricsAddress:
    """``ADDR:PORT`` (``[v6]:PORT`` for IPv6; a bare ``PORT`` means loopback), checked: a port in
    1-65535, and an address that is loopback unless ``allow_remote``. Raises one-line
    :class:`UsageError`s (a value typed wrongly: status 2); the one parser `orion up` and
    ``python -m orion_daemon`` share."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = LOOPBACK, text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise UsageError(f"metrics address {text!r} has no host: give ADDR:PORT, e.g. "
                         f"{LOOPBACK}:9400")  # fmt: skip
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(
            f"metrics port must be a number 1-65535 (got {port_text!r} in {text!r})"
        ) from None
    if not 1 <= port <= 65535:
        raise UsageError(f"metrics port must be 1-65535 (got {port})")
    address = MetricsAddress(host, port)
    if not allow_remote and not is_loopback(host):
        raise UsageError(
            f"metrics address {address} is not a loopback address: other hosts could read every "
            "client's command and memory; add --metrics-allow-remote to serve it there"
        )
    return address


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback IP address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def address_from_options(
    port: int | None, listen: str | None, *, allow_remote: bool
) -> MetricsAddress | None:
    """`orion up`'s ``--metrics-port`` / ``--metrics-listen`` / ``--metrics-allow-remote`` as one
    address (None: no metrics), or a one-line refusal."""
    if port is not None and listen is not None:
        raise UsageError("give --metrics-port or --metrics-listen, not both")
    if port is not None:
        return parse_address(f"{LOOPBACK}:{port}", allow_remote=allow_remote)
    if listen is not None:
        return parse_address(listen, allow_remote=allow_remote)
    if allow_remote:
        raise UsageError("--metrics-allow-remote needs --metrics-listen ADDR:PORT")
    return None


class _Server(WSGIServer):
    """A WSGI server serving each scrape on a thread of its own, at most :data:`MAX_SCRAPES` at
    once: a scraper that never reads holds only its own thread, until its deadline."""

    allow_reuse_address = True  # a restarted daemon takes its port back at once
    daemon_threads = True

    def __init__(self, address: MetricsAddress, family: socket.AddressFamily) -> None:
        self.address_family = family
        self._scrapes = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__((address.host, address.port), _QuietHandler, bind_and_activate=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._scrapes.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            threading.Thread(target=self._serve_one, args=(request, client_address),
                             name="orion-metrics-scrape", daemon=True).start()  # fmt: skip
        except RuntimeError:  # no thread could start
            self._scrapes.release()
            self.shutdown_request(request)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a scrape that breaks costs that scrape only
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._scrapes.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silent: a scraper hanging up (or timing out) is not news for the daemon's log."""


class _QuietHandler(WSGIRequestHandler):
    timeout = SCRAPE_DEADLINE_S  # the socket's deadline for every read and write

    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape in ``daemon.log`` (one every 15 s, for ever)."""


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name (``localhost``): what it resolves to first
        try:
            return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
        except OSError as error:
            raise OrionError(f"cannot serve metrics on {host}: {error}") from None


def bind(address: MetricsAddress) -> _Server:
    """The metrics server, bound and listening but not serving yet; the port in use or an
    address this machine does not have is a one-line :class:`OrionError`."""
    try:
        return _Server(address, _family(address.host))
    except OSError as error:
        reason = error.strerror or str(error)
        raise OrionError(f"cannot serve metrics on {address}: {reason}") from None


def check_free(address: MetricsAddress) -> None:
    """Refuses (one line) an address the daemon could not serve on, before anything starts: what
    `orion up` asks before it starts a daemon. (The daemon binds it again, first of all.)"""
    bind(address).server_close()


@contextlib.contextmanager
def serving(
    server: _Server, snapshot: Callable[[], dict[str, Any]], log: Callable[[str], None]
) -> Iterator[_Server]:
    """``server`` (from :func:`bind`) answering ``/metrics`` from ``snapshot`` on a thread of its
    own for the block; closed on every way out."""
    from prometheus_client import CollectorRegistry, make_wsgi_app

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot, log))
    server.set_app(make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              name="orion-metrics", daemon=True)  # fmt: skip
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Collector:
    """Reads one snapshot per scrape and turns it into metric families (:func:`families`)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], log: Callable[[str], None]):
        self._snapshot = snapshot
        self._log = log
        self._failed = False

    def collect(self) -> Iterable[Any]:
        try:
            status = self._snapshot()
        except Exception as error:  # the daemon is stopping, or a bug: an empty scrape
            if not self._failed:
                self._failed = True
                self._log(f"metrics: cannot read the daemon's status: {error!r}")
            return []
        return families(status)


def families(status: dict[str, Any]) -> list[Any]:
    """The metric families of one `orion status --json` object: per daemon (label ``gpu``) and
    per client (``gpu``, ``client``, ``role``); names and units as Prometheus has them."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        InfoMetricFamily,
        SummaryMetricFamily,
    )

    gpu = str(status["gpu"])
    out: list[Any] = []

    def gauge(name: str, doc: str, value: float | None, **labels: str) -> None:
        if value is None:
            return  # unknown now (a bound not derived yet): no sample rather than a made-up one
        family = GaugeMetricFamily(name, doc, labels=["gpu", *labels])
        family.add_metric([gpu, *labels.values()], value)
        out.append(family)

    info = InfoMetricFamily("orion_daemon", "The daemon: GPU, policy and sharing mode.",
                            labels=["gpu"])  # fmt: skip
    info.add_metric([gpu], {"gpu_name": str(status.get("gpu_name") or ""),
                            "policy": str(status["policy"]), "sharing": str(status["sharing"]),
                            "pid": str(status["pid"])})  # fmt: skip
    out.append(info)
    gauge("orion_daemon_uptime_seconds", "Time since the daemon started.", status["uptime_s"])
    gauge("orion_daemon_free_slots", "Client slots free.", status["free_slots"])
    gauge("orion_daemon_context_bytes", "GPU memory a client's CUDA context takes on this GPU, "
          "counted in each client's memory (0: not measured).",
          status.get("context_bytes"))  # fmt: skip
    queue_limit_us = status.get("queue_limit_us")
    gauge("orion_daemon_queue_limit_seconds", "BE work allowed on the GPU at once beside HP.",
          None if queue_limit_us is None else queue_limit_us / 1e6)  # fmt: skip
    gauge("orion_daemon_heartbeat_age_seconds",
          "Time since the daemon's last heartbeat (clients stop gating past 1 s).",
          status.get("heartbeat_age_s"))  # fmt: skip
    gauge("orion_daemon_records_degraded", "1 while the daemon's records are incomplete (a "
          "write failed), else 0.", 0 if status.get("records") is None else 1)  # fmt: skip
    gauge("orion_daemon_record_writes_pending", "Record writes submitted and not yet done.",
          status.get("records_pending", 0))  # fmt: skip
    for name, key, doc in (
        ("orion_daemon_record_writes", "record_writes", "Record writes done."),
        ("orion_daemon_record_write_failures", "record_write_failures", "Record writes failed."),
    ):
        counter = CounterMetricFamily(name, doc, labels=["gpu"])
        counter.add_metric([gpu], status.get(key, 0))
        out.append(counter)
    events = CounterMetricFamily("orion_client_events", "Clients that joined, left (exited), "
                                 "died (killed), expired or were refused.",
                                 labels=["gpu", "event"])  # fmt: skip
    for event in CLIENT_EVENTS:
        events.add_metric([gpu, event], status.get("client_events", {}).get(event, 0))
    out.append(events)
    requests = SummaryMetricFamily("orion_daemon_request_duration_seconds",
                                   "Time the daemon took to answer requests on its socket.",
                                   labels=["gpu", "op"])  # fmt: skip
    for op, timed in sorted(status.get("requests", {}).items()):
        requests.add_metric([gpu, op], count_value=timed["count"], sum_value=timed["seconds"])
    out.append(requests)
    out.extend(_client_families(gpu, status["clients"]))
    return out


def _client_families(gpu: str, clients: list[dict[str, Any]]) -> list[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["gpu", "client", "role"]
    made: dict[str, Any] = {}

    def add(kind: type, name: str, doc: str, client: dict[str, Any], value: float | None,
            **extra: str) -> None:  # fmt: skip
        if value is None:
            return
        if name not in made:
            made[name] = kind(name, doc, labels=[*labels, *extra])
        made[name].add_metric([gpu, client["name"], client["role"], *extra.values()], value)

    counter, gauge = CounterMetricFamily, GaugeMetricFamily
    for c in clients:
        add(gauge, "orion_client_info", "A client holding a slot (value 1), with its pid, slot "
            "and state.", c, 1, pid=str(c["pid"]), slot=str(c["slot"]),
            state=str(c["state"]))  # fmt: skip
        add(counter, "orion_client_launches", "Kernel and graph launches.", c, c["launches"])
        add(counter, "orion_client_unknown_launches", "Launches of kernels its profile does not "
            "know.", c, c["unknown_launches"])  # fmt: skip
        add(gauge, "orion_client_unknown_kernels", "Distinct kernels its profile does not know.",
            c, len(c["unknown_kernels"]))  # fmt: skip
        add(counter, "orion_client_held_launches", "BE launches held (all reasons).", c,
            c["held_launches"])  # fmt: skip
        for reason in HELD_REASONS:
            add(counter, "orion_client_held_launches_by_reason", "BE launches held, by reason "
                "(a launch counts once per reason it waited for).", c,
                c["held_by"].get(reason, 0), reason=reason)  # fmt: skip
        add(counter, "orion_client_held_seconds", "Time BE launches were held.", c,
            c["held_ms"] / 1e3)  # fmt: skip
        add(counter, "orion_client_gate_waits", "GPU-side gate waits of BE launches.", c,
            c["gate_waits"])  # fmt: skip
        add(gauge, "orion_client_gpu_share_ratio", "Share of GPU time over the quota window.", c,
            c["gpu_share"])  # fmt: skip
        add(gauge, "orion_client_min_util_ratio", "GPU-time share promised.", c, c["min_util"])
        add(gauge, "orion_client_max_util_ratio", "GPU-time share cap.", c, c["max_util"])
        add(gauge, "orion_client_memory_used_bytes", "GPU memory held now: allocations and "
            "its CUDA context.", c,
            c["memory_used_bytes"])  # fmt: skip
        add(gauge, "orion_client_memory_peak_bytes", "Most GPU memory allocated at once.", c,
            c["memory_peak_bytes"])  # fmt: skip
        add(gauge, "orion_client_memory_limit_bytes", "GPU memory it may allocate (no sample: no "
            "limit).", c, c["memory_limit_bytes"])  # fmt: skip
        add(counter, "orion_client_allocations_refused", "Allocations refused at its memory "
            "limit.", c, c["allocations_refused"])  # fmt: skip
        add(gauge, "orion_client_slowdown_ratio", "GPU time of its timed launches over what they "
            "took alone, over the last seconds (`orion status`'s interference; the HP's is the "
            "slowdown BE work costs it).", c, c["interference"])  # fmt: skip
        add(gauge, "orion_client_felt_slowdown_ratio", "Time from its sampled launches' calls to "
            "the end of their work over the same alone, over the last seconds (`orion status`'s "
            "felt_slowdown: the slowdown as the program feels it, waits for the GPU included).",
            c, c.get("felt_slowdown"))  # fmt: skip
        add(gauge, "orion_client_felt_p99_ratio", "The largest felt/alone ratio more than 1% of "
            "its sampled launches exceeded, over the last seconds (`orion status`'s felt_p99: "
            "their 99th percentile, from below; 1 when none exceeded 1.05).",
            c, c.get("felt_p99"))  # fmt: skip
        add(gauge, "orion_client_felt_p99_over_alone_ratio", "Its recent felt p99 over the felt "
            "p99 of its launches that ran alone since it joined (`orion status`'s "
            "felt_p99_over_alone: the tail against its own scatter without BE).",
            c, c.get("felt_p99_over_alone"))  # fmt: skip
        add(gauge, "orion_client_request_slowdown_ratio", "An HP's requests timed whole (first "
            "launch call to the end of the last kernel) over its requests alone, over the last "
            "seconds (`orion status`'s request_slowdown).",
            c, c.get("request_slowdown"))  # fmt: skip
        add(gauge, "orion_client_request_p99_over_alone_ratio", "The p99 of its requests' ratios "
            "over the same of its requests alone (`orion status`'s request_p99_over_alone).",
            c, c.get("request_p99_over_alone"))  # fmt: skip
    return list(made.values())
