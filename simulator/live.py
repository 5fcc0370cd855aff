"""Live mode: the deployment as real HTTP servers on 127.0.0.1.

A router serves OpenAI `/v1/chat/completions`; it sends each request to a prefill node and a
decode node over HTTP (bootstrap fields and W3C `traceparent` injected, as SMG's PD router
does) and answers with the decode node's response. Every engine node serves its own endpoints:
`/v1/chat/completions`, `/metrics`, `/server_info`, `/v1/models`, `/v1/loads`, `/health`.
All servers and the event runner share one asyncio loop, so the model is only touched from
one thread. Simulated time runs at wall-clock speed times `speed`.

Test and demo hook: a chat body may carry `sim_fault` (see `RequestFault`) to make this request
abort mid-transfer, have late RDMA writes, lose its drain ack, or time out; real clients never
send it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from pathlib import Path
from typing import IO, Any, get_type_hints

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from simulator.clock import ScaledClock
from simulator.content import PromptError, marker_for, parse_chat
from simulator.decode import DecodeNode
from simulator.deployment import STARTUP_LEAD_S, Deployment
from simulator.node import EngineNode, error_body
from simulator.prefill import PrefillNode
from simulator.scenario import Scenario
from simulator.telemetry.otlp import Tracing, extract, inject
from simulator.traffic import RequestFault, TrafficGenerator, to_chat_body

PROM_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUIET_PATHS = ("/metrics", "/health")


def _fault_schema() -> type[BaseModel]:
    """The `sim_fault` body field: `RequestFault`'s own fields, so the two cannot drift apart."""
    hints = get_type_hints(RequestFault)
    fields: dict[str, Any] = {
        f.name: (hints[f.name], f.default) for f in dataclasses.fields(RequestFault)
    }
    return create_model("SimFault", __config__=ConfigDict(extra="forbid"), **fields)


SimFault = _fault_schema()


class FileSink:
    """Each node's log appended to `<dir>/<node>.log`, flushed after every batch of events."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def write(self, node: str, t: float, text: str) -> None:
        fh = self._files.get(node)
        if fh is None:
            fh = self._files[node] = open(self.folder / f"{node}.log", "a", encoding="utf-8")  # noqa: SIM115
        fh.write(text)

    def snapshot(self, node: str, t: float, exposition: bytes, info: dict[str, Any]) -> None:
        return None

    def flush(self) -> None:
        for fh in self._files.values():
            fh.flush()

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()


# What a request still waiting for the engine gets when the deployment stops.
_CLOSING: dict[str, Any] = error_body("server is shutting down", "ServiceUnavailable", 503)


def _free_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class LiveDeployment:
    """Router and engine nodes serving over HTTP; use as a context manager or `run()`."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        log_dir: Path,
        speed: float = 1.0,
        host: str = "127.0.0.1",
        port_base: int = 0,
        otlp_endpoint: str | None = None,
        seed: int | None = None,
        apply_restarts: bool = False,
    ) -> None:
        self.scenario = scenario
        self.host = host
        self.port_base = port_base
        self.sim_start = time.time()
        self.clock = ScaledClock(self.sim_start, speed)
        self.sink = FileSink(log_dir)
        self.log_dir = log_dir
        self.dep = Deployment(
            scenario,
            self.sink,
            seed=seed,
            shift=self.sim_start - scenario.start_epoch,
            snapshots=False,
        )
        self.apply_restarts = apply_restarts
        self.tracing = Tracing(otlp_endpoint, seed=self.dep.seed) if otlp_endpoint else None
        self.urls: dict[str, str] = {}
        self.router_url = ""
        self._servers: list[uvicorn.Server] = []
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping = False
        self._client: httpx.AsyncClient | None = None
        self._router_tracer: Any = None
        self._inflight: set[asyncio.Task[Any]] = set()
        # Engine replies awaited by open HTTP requests: answered 503 when the deployment stops,
        # so that the servers close with no handler left to cancel (no tracebacks on exit).
        self._awaiting: set[asyncio.Future[tuple[int, dict[str, Any]]]] = set()
        self._by_host: dict[str, PrefillNode] = {p.host: p for p in self.dep.prefills}

    # -- the model, driven by the wall clock ----------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def _catch_up(self) -> float:
        now = self.clock.now()
        self.dep.queue.run_until(now)
        return now

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run_events(self) -> None:
        assert self._wake is not None
        queue = self.dep.queue
        while not self._stopping:
            nxt = queue.next_time()
            now = self.clock.now()
            if nxt is not None and nxt <= now:
                queue.run_until(now)
                self.sink.flush()
                continue
            delay = 0.5 if nxt is None else min(0.5, self.clock.wall_delay(nxt))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(delay, 0.0005))
            except TimeoutError:
                pass

    # -- engine node endpoints ------------------------------------------------------------
    def _node_app(self, node: EngineNode) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
        live = self

        def quiet_access(request: Request, status: int) -> None:
            path = request.url.path
            if not path.startswith(QUIET_PATHS):
                t = live.now()
                client = f"{request.client.host}:{request.client.port}" if request.client else "-"
                node.log(t, node.fmt.access(t, client, request.method, path, status))

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await live._node_chat(node, request)

        @app.post("/generate")
        async def generate(request: Request) -> Response:
            return await live._node_chat(node, request)

        @app.get("/metrics")
        async def metrics(request: Request) -> Response:
            live._catch_up()
            if not node.spec.enable_metrics:
                return Response(status_code=404)
            return Response(node.metrics.exposition(), media_type=PROM_CONTENT_TYPE)

        async def info_endpoint(request: Request) -> Response:
            live._catch_up()
            quiet_access(request, 200)
            live.sink.flush()
            return JSONResponse(node.server_info())

        app.add_api_route("/server_info", info_endpoint, methods=["GET"])
        app.add_api_route("/get_server_info", info_endpoint, methods=["GET"])

        @app.get("/v1/models")
        async def models(request: Request) -> Response:
            quiet_access(request, 200)
            return JSONResponse(node.models_card())

        @app.get("/v1/loads")
        async def loads(request: Request) -> Response:
            now = live._catch_up()
            quiet_access(request, 200)
            return JSONResponse(node.loads(now))

        async def health(request: Request) -> Response:
            live._catch_up()
            return Response(status_code=503 if node.down else 200)

        for path in ("/health", "/health_generate", "/ready"):
            app.add_api_route(path, health, methods=["GET"])
        return app

    async def _node_chat(self, node: EngineNode, request: Request) -> Response:
        now = self._catch_up()
        client = f"{request.client.host}:{request.client.port}" if request.client else "-"
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(error_body("invalid JSON", "BadRequestError", 400), 400)
        except ClientDisconnect:  # the caller gave up (the deployment stopping): nobody to answer
            return Response(status_code=499)
        if not isinstance(body, dict):
            return JSONResponse(error_body("body must be an object", "BadRequestError", 400), 400)
        room = body.get("bootstrap_room")
        if not isinstance(room, int):
            rid = self.dep.new_rid()
            node.log(now, node.fmt.missing_room(now, rid))
            node.log(now, node.fmt.access(now, client, "POST", request.url.path, 400))
            self.sink.flush()
            msg = "Disaggregated request received without bootstrap room id."
            return JSONResponse(error_body(msg, "BadRequestError", 400), 400)
        try:
            spec = parse_chat(body.get("messages") or [])
            fault = (
                RequestFault(**SimFault.model_validate(body["sim_fault"]).model_dump())
                if body.get("sim_fault")
                else None
            )
        except (PromptError, ValidationError) as exc:
            node.log(now, node.fmt.access(now, client, "POST", request.url.path, 400))
            self.sink.flush()
            return JSONResponse(error_body(str(exc), "BadRequestError", 400), 400)
        req = self.dep.rooms.get(room)
        if req is None:
            req = self.dep.create(
                now,
                spec,
                room=room,
                max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
                temperature=float(body.get("temperature", 0.7)),
                stream=False,
                fault=fault,
            )
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[int, dict[str, Any]]] = loop.create_future()

        def reply(status: int, payload: dict[str, Any]) -> None:
            if not done.done():
                done.set_result((status, payload))

        parent = extract(dict(request.headers))
        if isinstance(node, PrefillNode):
            req.p_rid = self.dep.new_rid()
            req.p_client = client
            req.on_p_done = reply
            req.p_trace = parent
            node.receive(now, req)
        else:
            assert isinstance(node, DecodeNode)
            host = str(body.get("bootstrap_host", ""))
            if req.p_node is None and host in self._by_host:
                req.p_node = self._by_host[host]
            req.d_rid = self.dep.new_rid()
            req.d_client = client
            req.on_d_done = reply
            req.d_trace = parent
            node.receive(now, req)
        self.sink.flush()
        self._poke()
        if self._stopping:
            reply(503, _CLOSING)
        self._awaiting.add(done)
        try:
            status, payload = await done
        finally:
            self._awaiting.discard(done)
        self.sink.flush()
        return JSONResponse(payload, status_code=status)

    # -- the router -----------------------------------------------------------------------
    def _router_app(self) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
        live = self

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await live._route(request)

        @app.get("/v1/models")
        async def models() -> Response:
            node = live.dep.decodes[0]
            return JSONResponse(node.models_card())

        @app.get("/health")
        async def health() -> Response:
            return Response(status_code=200 if live.dep.pick() is not None else 503)

        return app

    async def _route(self, request: Request) -> Response:
        self._catch_up()
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(error_body("invalid JSON", "BadRequestError", 400), 400)
        except ClientDisconnect:
            return Response(status_code=499)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse(error_body("messages required", "BadRequestError", 400), 400)
        pair = self.dep.pick()
        if pair is None:
            self.dep.truth.requests_rejected_by_router += 1
            return JSONResponse(error_body("no healthy workers", "ServiceUnavailable", 503), 503)
        p, d = pair
        room = self.dep.new_room()
        forwarded = dict(body)
        forwarded.update(
            {
                "bootstrap_host": p.host,
                "bootstrap_port": p.spec.bootstrap_port,
                "bootstrap_room": room,
            }
        )
        assert self._client is not None
        span = None
        headers: dict[str, str] = {}
        t0 = self.now()
        if self._router_tracer is not None:
            span = self._router_tracer.start_span(
                "http_request",
                start_time=int(t0 * 1e9),
                attributes={
                    "method": "POST",
                    "uri": "/v1/chat/completions",
                    "request_id": f"{room:x}",
                    "module": "smg",
                },
            )
            headers = inject(span)
        try:
            prefill = asyncio.create_task(
                self._client.post(
                    self.urls[p.name] + "/v1/chat/completions", json=forwarded, headers=headers
                )
            )
            # SMG PD mode: the client gets decode's answer; prefill's is only drained
            self._inflight.add(prefill)
            prefill.add_done_callback(self._settled)
            d_resp = await self._client.post(
                self.urls[d.name] + "/v1/chat/completions", json=forwarded, headers=headers
            )
        except httpx.HTTPError as exc:
            return JSONResponse(error_body(f"upstream error: {exc}", "BadGateway", 502), 502)
        if span is not None:
            t1 = self.now()
            span.set_attributes({"status_code": d_resp.status_code, "latency": t1 - t0})
            span.end(end_time=int(t1 * 1e9))
        return Response(
            d_resp.content, status_code=d_resp.status_code, media_type="application/json"
        )

    # -- lifecycle ------------------------------------------------------------------------
    def _attach_tracers(self) -> None:
        if self.tracing is None:
            return
        rng = self.dep.rng
        for node in self.dep.nodes.values():
            node.tracer = self.tracing.node(
                node.name, node.role, f"{rng.getrandbits(64):016x}", 1000 + rng.randrange(60000)
            )
        self._router_tracer = self.tracing.router()

    async def _main(self, until: float | None, drive: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=512))
        self._attach_tracers()
        self.dep.boot(restarts=self.apply_restarts, lead=STARTUP_LEAD_S)
        self.dep.queue.run_until(self.clock.now())
        self.sink.flush()
        apps: list[tuple[str, FastAPI]] = [("router", self._router_app())]
        apps += [(name, self._node_app(node)) for name, node in self.dep.nodes.items()]
        tasks: list[asyncio.Task[None]] = []
        for i, (name, app) in enumerate(apps):
            port = self.port_base + i if self.port_base else 0
            sock = _free_socket(self.host, port)
            url = f"http://{self.host}:{sock.getsockname()[1]}"
            if name == "router":
                self.router_url = url
            else:
                self.urls[name] = url
            config = uvicorn.Config(
                app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=1
            )
            server = uvicorn.Server(config)
            self._servers.append(server)
            tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
        runner = asyncio.create_task(self._run_events())
        while not all(s.started for s in self._servers):
            await asyncio.sleep(0.005)
        self._ready.set()
        driver = asyncio.create_task(self._drive()) if drive else None
        try:
            while not self._stopping:
                if until is not None and time.monotonic() >= until:
                    break
                await asyncio.sleep(0.05)
        finally:
            self._stopping = True
            if driver is not None:
                driver.cancel()
            # Requests still waiting for the engine are answered as an engine going down would,
            # and the router's and driver's calls get those answers before anything is cancelled.
            for waiting in list(self._awaiting):
                if not waiting.done():
                    waiting.set_result((503, _CLOSING))
            if self._inflight:
                await asyncio.wait(list(self._inflight), timeout=2.0)
            for task in list(self._inflight):
                task.cancel()
            for server in self._servers:
                server.should_exit = True
            await asyncio.gather(*tasks, return_exceptions=True)
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await self._client.aclose()
            self.sink.flush()

    async def _drive(self) -> None:
        """Send the scenario's own traffic to the router, on the scenario's (shifted) clock."""
        dep = self.dep
        gen = TrafficGenerator(self.scenario, seed=dep.seed, shift=dep.shift, start=self.sim_start)
        assert self._client is not None
        client = self._client
        pending = self._inflight
        model = self.scenario.model.name
        for n, arrival in enumerate(gen):
            delay = self.clock.wall_delay(arrival.t)
            if delay > 0:
                await asyncio.sleep(delay)
            marker = marker_for(n + 1, dep.marker_salt) if arrival.marker else None
            body = to_chat_body(arrival, model, marker)
            task = asyncio.create_task(
                client.post(self.router_url + "/v1/chat/completions", json=body)
            )
            pending.add(task)
            task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        """A fire-and-forget call has ended: forget it, and take its error (a connection closed
        as the deployment stops), which nobody awaits and asyncio would print at exit."""
        self._inflight.discard(task)
        if not task.cancelled():
            task.exception()

    def wait(self, duration_s: float | None = None) -> None:
        """Block the calling thread for `duration_s` wall seconds (forever if None)."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while self._thread is not None and self._thread.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                return
            self._thread.join(timeout=0.2)

    def __enter__(self) -> LiveDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, drive: bool = False, timeout: float = 20.0) -> LiveDeployment:
        """Serve from a background thread; returns once every server listens."""

        def target() -> None:
            try:
                asyncio.run(self._main(None, drive))
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=target, name="kvsim-live", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("live deployment did not start in time")
        if self._error is not None:
            raise RuntimeError(f"live deployment failed: {self._error!r}") from self._error
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._thread is not None:
            self._thread.join(timeout=20.0)
            self._thread = None
        self.close()

    def close(self) -> None:
        if self.tracing is not None:
            self.tracing.shutdown()
            self.tracing = None
        self.sink.close()
