"""Celery 5 on a durable RabbitMQ broker: the peer baseline of benchmarks/fleet.py.

    python -m benchmarks.fleetsim.celery_baseline [--low 50] [--burst 2000] [--concurrency 2]

(run from the repository root). `measure()` starts a Celery worker subprocess (prefork pool, N
processes, its own uuid-named queue), waits until it runs tasks (20 warm-up tasks, discarded), then:

  low load  `--low` tasks, one at a time: each is sent only after the previous one has started.
  burst     `--burst` tasks sent back to back from this process as fast as apply_async returns.

What is measured is apply_async -> task start: this process passes `time.time()` taken just before
apply_async as the task's argument, and the task's first action is an RPUSH of (its start time -
that) and its start time to a Redis list (one key per phase and run); the task does nothing else.
Both clocks are this machine's wall clock. Reported: p50/p99 of that latency at low load and in the
burst, and tasks/s = burst tasks / (first apply_async of the burst -> latest task start).

The app is configured for durability as a careful user would configure it, so that the comparison
with Drover (which acks a run's messages only once they are stored) is fair:
  broker                    amqp://guest:guest@127.0.0.1:5672// (py-amqp transport)
  publisher confirms        broker_transport_options={"confirm_publish": True}: apply_async waits
                            for RabbitMQ's basic.ack of each message before it returns
  durable queue             Celery's default (the queue and its direct exchange are durable)
  persistent messages       Celery's default delivery_mode (2, persistent)
  task_acks_late            a task is acked after it ran, not when it was received
  task_reject_on_worker_lost  a task whose worker process died is requeued, not acked
  worker_prefetch_multiplier=1  each worker process reserves at most one task ahead
No result backend (results are ignored). Everything started or created here (the worker, the queue
and its exchange, the Redis keys) is stopped or deleted at the end, also on error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import redis
from celery import Celery  # type: ignore[import-untyped]

BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
REDIS_URL = "redis://127.0.0.1:6379/0"
MODULE = "benchmarks.fleetsim.celery_baseline"
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
WARM_UP_TASKS = 20
POLL_S = 0.001
STOP_GRACE_S = 10.0


def _make_app() -> Any:
    celery_app = Celery(MODULE, broker=BROKER_URL, set_as_current=False)
    celery_app.conf.update(
        broker_transport_options={"confirm_publish": True},
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
    )
    return celery_app


app = _make_app()
_worker_redis: dict[int, redis.Redis] = {}


def _redis_of_this_process() -> redis.Redis:
    """One Redis client per worker process (the prefork pool forks after importing this module)."""
    client = _worker_redis.get(os.getpid())
    if client is None:
        client = _worker_redis[os.getpid()] = redis.Redis.from_url(REDIS_URL)
    return client


@app.task(name=f"{MODULE}.record", ignore_result=True)
def record(sent_at: float, key: str) -> None:
    """The no-op task: record apply_async -> start and the start time, nothing else."""
    started = time.time()
    _redis_of_this_process().rpush(key, f"{started - sent_at!r} {started!r}")


@dataclasses.dataclass
class _Run:
    queue: str
    keys: str
    client: redis.Redis
    deadline: float
    proc: subprocess.Popen[bytes] | None = None
    log: pathlib.Path | None = None

    def key(self, phase: str) -> str:
        return f"{self.keys}:{phase}"


def _check_redis(client: redis.Redis) -> None:
    try:
        client.ping()
    except redis.RedisError as err:
        raise RuntimeError(f"Redis is unreachable at {REDIS_URL}: {err}") from err


def _check_rabbitmq() -> None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=10)
    except Exception as err:
        raise RuntimeError(f"RabbitMQ is unreachable at {BROKER_URL}: {err!r}") from err


def _start_worker(run: _Run, concurrency: int, log: pathlib.Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "celery", "-A", MODULE, "worker", "--pool", "prefork"]
    command += ["--concurrency", str(concurrency), "--loglevel", "WARNING"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    command += ["-Q", run.queue, "-n", f"{run.queue}@%h"]
    with log.open("wb") as out:
        run.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run.log = log


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (warm shutdown), SIGKILL of the whole process group after 10 s, then the stragglers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the pool's processes, if the main one left them behind
    proc.wait()


def _delete_queue(queue: str) -> None:
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_delete(queue)
        channel.exchange_delete(queue)  # Celery declared a durable direct exchange of the same name


def _log_tail(run: _Run, lines: int = 20) -> str:
    if run.log is None or not run.log.exists():
        return ""
    return "\n".join(run.log.read_text(errors="replace").splitlines()[-lines:])


def _send(run: _Run, key: str) -> float:
    """apply_async one task; returns the wall time taken just before the call (the task's sent_at)."""
    sent_at = time.time()
    record.apply_async((sent_at, key), queue=run.queue)
    return sent_at


def _wait_recorded(run: _Run, key: str, count: int, what: str) -> None:
    """Poll LLEN every ~1 ms until `count` tasks are recorded under `key`."""
    while run.client.llen(key) < count:
        if run.proc is not None and run.proc.poll() is not None:
            raise RuntimeError(f"the Celery worker exited ({run.proc.returncode}) {what}:\n{_log_tail(run)}")
        if time.monotonic() > run.deadline:
            raise RuntimeError(f"timed out {what} ({run.client.llen(key)} of {count} recorded):\n{_log_tail(run)}")
        time.sleep(POLL_S)


def _samples(run: _Run, key: str) -> tuple[list[float], list[float]]:
    """(apply_async -> start latencies in ms, start times) recorded under `key`."""
    latencies: list[float] = []
    starts: list[float] = []
    for entry in run.client.lrange(key, 0, -1):
        latency, started = entry.split()
        latencies.append(float(latency) * 1000)
        starts.append(float(started))
    return latencies, starts


def _percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def _warm_up(run: _Run) -> None:
    """The first task's round trip shows the worker consumes; the rest warm both pool processes."""
    key = run.key("warm")
    _send(run, key)
    _wait_recorded(run, key, 1, "waiting for the Celery worker to start")
    for _ in range(WARM_UP_TASKS - 1):
        _send(run, key)
    _wait_recorded(run, key, WARM_UP_TASKS, "waiting for the warm-up tasks")
    run.client.delete(key)


def _low_load(run: _Run, tasks: int) -> dict[str, float]:
    key = run.key("low")
    for i in range(tasks):
        _send(run, key)
        _wait_recorded(run, key, i + 1, "at low load")
    latencies, _ = _samples(run, key)
    return {"low_p50_ms": _percentile(latencies, 50), "low_p99_ms": _percentile(latencies, 99)}


def _burst(run: _Run, tasks: int) -> dict[str, float]:
    key = run.key("burst")
    first = time.time()
    for _ in range(tasks):
        _send(run, key)
    _wait_recorded(run, key, tasks, "in the burst")
    latencies, starts = _samples(run, key)
    return {
        "burst_p50_ms": _percentile(latencies, 50),
        "burst_p99_ms": _percentile(latencies, 99),
        "tasks_per_s": tasks / (max(starts) - first),
    }


def _clean_up(run: _Run) -> None:
    errors = []
    if run.proc is not None:
        _stop_worker(run.proc)
    try:
        run.client.delete(*(run.key(phase) for phase in ("warm", "low", "burst")))
    except redis.RedisError as err:
        errors.append(f"Redis keys {run.keys}:*: {err}")
    try:
        _delete_queue(run.queue)
    except Exception as err:
        errors.append(f"queue {run.queue}: {err!r}")
    if errors:
        print("celery baseline: could not delete " + "; ".join(errors), file=sys.stderr)


def measure(
    low_tasks: int = 50, burst_tasks: int = 2000, concurrency: int = 2, timeout: float = 300.0
) -> dict[str, float]:
    """Run the Celery baseline; returns low_p50_ms, low_p99_ms, burst_p50_ms, burst_p99_ms, tasks_per_s.

    Raises RuntimeError when RabbitMQ or Redis is unreachable, the worker does not start, or the
    whole measurement takes longer than `timeout` seconds.
    """
    if low_tasks < 1 or burst_tasks < 1:
        raise ValueError("low_tasks and burst_tasks must be at least 1")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5, decode_responses=True)
    _check_redis(client)
    _check_rabbitmq()
    name = f"fleetsim-celery-{uuid.uuid4().hex}"
    run = _Run(queue=name, keys=name, client=client, deadline=time.monotonic() + timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="fleetsim-celery-") as tmp:
            try:
                _start_worker(run, concurrency, pathlib.Path(tmp) / "worker.log")
                _warm_up(run)
                figures = _low_load(run, low_tasks)
                figures.update(_burst(run, burst_tasks))
            finally:
                _clean_up(run)
    finally:
        client.close()
    return figures


def _lines(figures: dict[str, float]) -> list[str]:
    return [
        f"celery apply->start p50 {figures['low_p50_ms']:.1f} ms p99 {figures['low_p99_ms']:.1f} ms (low load)",
        f"celery apply->start p50 {figures['burst_p50_ms']:.1f} ms p99 {figures['burst_p99_ms']:.1f} ms (burst)",
        f"celery tasks/s {figures['tasks_per_s']:.1f} (burst)",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--low", type=int, default=50, help="tasks sent one at a time (default 50)")
    parser.add_argument("--burst", type=int, default=2000, help="tasks sent back to back (default 2000)")
    parser.add_argument("--concurrency", type=int, default=2, help="worker pool processes (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run (default 300)")
    args = parser.parse_args(argv)
    figures = measure(low_tasks=args.low, burst_tasks=args.burst, concurrency=args.concurrency, timeout=args.timeout)
    print("\n".join(_lines(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
