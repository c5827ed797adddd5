"""Process-level twin of compose.yaml: migrate, gunicorn API, Celery workers and beat.

The same ``wakemark`` commands the containers run, as real subprocesses against a real
Postgres+pgvector and Redis (or, without a database URL, the embedded ``wakemark serve``
alone). Used by the tests in this folder and by ``make stack``, which runs it in the
foreground against ``WAKEMARK_DATABASE_URL`` and ``WAKEMARK_REDIS_URL``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# name -> arguments after `wakemark`, in start order; the commands of compose.yaml's
# services (the worker queues split as in the `split` profile, embedding+backfill joined).
WORKERS = {
    "worker-extraction": ["worker", "-Q", "extraction"],
    "worker-embedding": ["worker", "-Q", "embedding,backfill"],
}
BEAT = ["beat"]


class StackError(RuntimeError):
    """A process died or never became healthy; the message carries the logs' tails."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wakemark_argv(*args: str) -> list[str]:
    script = Path(sys.executable).absolute().with_name("wakemark")
    base = (
        [str(script)] if script.exists() else [sys.executable, "-m", "wakemark.services.cli.main"]
    )
    return [*base, *args]


class Proc:
    """One subprocess in its own process group, output captured to a log file."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], cwd: Path) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- start: {' '.join(self.argv)}\n".encode())
            log.flush()
            # Own session: stop/kill reach gunicorn's and Celery's children too.
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group, like ``docker kill`` on a container."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def terminate(self) -> None:
        """Ask the leader to shut down gracefully (gunicorn and Celery handle SIGTERM)."""
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (graceful), then SIGKILL for the group if it lingers."""
        if self.popen is None:
            return
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)
        self.kill()  # also reaps children the leader left behind

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(text[-lines:])


class RedisServer(Proc):
    """A private redis-server on a free port: restarting it disturbs nobody else. With a
    ``password`` it refuses unauthenticated clients, as compose's Redis does."""

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None) -> None:
        self.port = port or free_port()
        self.password = password
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            shutil.which("redis-server") or "redis-server",
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
        ]  # fmt: skip
        if password:
            argv += ["--requirepass", password]
        super().__init__("redis", argv, workdir)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        super().start(env or dict(os.environ), cwd or self.dir)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
            ):
                sock.sendall(b"PING\r\n")
                # -NOAUTH: up, and refusing strangers as asked.
                if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                    return
            if not self.alive:
                break
            time.sleep(0.05)
        raise StackError(f"redis-server did not start on {self.port}:\n{self.tail()}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Any:
    """A small tmpfs mounted on ``path`` (a real full disk: writes fail with ENOSPC);
    needs CAP_SYS_ADMIN. Raises ``PermissionError`` when this process may not mount."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
    )
    if done.returncode != 0:
        raise PermissionError(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace')}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the file system of ``path`` until ``leave`` bytes are free, or it is full;
    returns the filler file."""
    filler = path / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as fh:
        while True:
            stat = os.statvfs(path)
            room = stat.f_bavail * stat.f_frsize - leave
            if room <= 0:
                break
            try:
                fh.write(chunk[:room])
            except OSError as exc:  # ENOSPC: full, however the numbers above added up
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler


PG_BIN = Path(os.environ.get("WAKEMARK_PG_BIN", "/usr/lib/postgresql/15/bin"))
INIT_SCRIPT = Path(__file__).resolve().parents[2] / "docker" / "postgres-init.sh"


def _pg_user() -> dict[str, Any]:
    """Postgres refuses to run as root: as root, run it as the ``postgres`` account."""
    if os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


class PostgresServer(Proc):
    """A private Postgres cluster (initdb into ``workdir``) on a free port, set up by
    compose's ``docker/postgres-init.sh`` as its superuser: the non-superuser ``wakemark``
    role owning database ``wakemark``, and the extensions. Stopping and restarting it
    disturbs nobody else."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        # Its own directory under the system temp dir: the ``postgres`` account (as root)
        # cannot enter a pytest tmp_path (0700, root's).
        self.root = Path(tempfile.mkdtemp(prefix="wakemark-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        argv = [
            str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.socket_dir}",
            "-c", "fsync=off", "-c", "max_connections=200",
        ]  # fmt: skip
        super().__init__("postgres", argv, workdir)

    @property
    def url(self) -> str:
        return f"postgresql://wakemark@127.0.0.1:{self.port}/wakemark"

    def init(self) -> None:
        """initdb (trust auth on loopback), then start and create role, database and
        extensions; leaves the server running."""
        as_user = _pg_user()
        os.chmod(self.root, 0o711)
        for path in (self.data, self.socket_dir):
            path.mkdir(mode=0o700, exist_ok=True)
            if as_user:
                os.chown(path, as_user["user"], as_user["group"])
        initdb = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"]
        done = subprocess.run(initdb, capture_output=True, **as_user)
        if done.returncode != 0:
            raise StackError(f"initdb failed:\n{done.stderr.decode(errors='replace')}")
        self.start()
        # compose's own init script, as the image's entrypoint runs it: the superuser makes
        # the non-superuser owner role, its databases and the extensions.
        env = {
            **os.environ,
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.port),
            "POSTGRES_USER": "postgres",
            "POSTGRES_DB": "postgres",
            "POSTGRES_APP_PASSWORD": secrets.token_hex(16),  # trust auth: unused
        }
        done = subprocess.run(["sh", str(INIT_SCRIPT)], env=env, capture_output=True)
        if done.returncode != 0:
            raise StackError(f"{INIT_SCRIPT.name} failed:\n{done.stderr.decode(errors='replace')}")

    def start(self, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        as_user = _pg_user()
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.data, start_new_session=True, **as_user,
            )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
            )
            if ready.returncode == 0:
                return
            if not self.alive:
                break
            time.sleep(0.1)
        raise StackError(f"postgres did not start on {self.port}:\n{self.tail()}")

    def close(self) -> None:
        """Stop for good and delete the cluster."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def terminate(self) -> None:
        """Fast shutdown (SIGINT): sessions are cut off, as `docker stop` does to them."""
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGINT)


def least_privilege(database_url: str, redis_url: str | None) -> None:
    """Refuse to run the deployment's processes with more power than compose gives them:
    the database role must be no superuser (it could run ``COPY ... TO PROGRAM``), and
    Redis must refuse a client without the password."""
    import psycopg
    import redis

    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if row is None or row[0]:
        raise StackError("the database role is a superuser: run the app as a non-superuser owner")
    if not redis_url:
        return
    anonymous = redis.Redis.from_url(redis_url, socket_connect_timeout=3, socket_timeout=3)
    anonymous.connection_pool.connection_kwargs.pop("password", None)
    anonymous.connection_pool.connection_kwargs.pop("username", None)
    try:
        anonymous.ping()
    except redis.AuthenticationError:
        return
    except redis.ResponseError as exc:  # NOAUTH on servers that answer it as an error
        if "NOAUTH" in str(exc):
            return
        raise
    finally:
        anonymous.close()
    raise StackError("Redis accepts clients without a password: start it with --requirepass")


class Stack:
    """The deployment's processes (or embedded ``wakemark serve`` when no database URL)."""

    def __init__(
        self,
        workdir: Path,
        *,
        database_url: str | None = None,
        redis_url: str | None = None,
        port: int | None = None,
        token: str | None = None,
        env: dict[str, str] | None = None,
        worker_concurrency: int | None = 1,
    ) -> None:
        self.workdir = workdir
        self.database_url = database_url
        self.redis_url = redis_url
        self.port = port or free_port()
        self.token = token or secrets.token_hex(16)
        self.extra_env = env or {}
        self.worker_concurrency = worker_concurrency
        self.log_dir = workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def deployment(self) -> bool:
        return bool(self.database_url)

    def env(self) -> dict[str, str]:
        # Only what this stack sets: an WAKEMARK_* of the caller's shell must not leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAKEMARK_")}
        env.update(
            HF_HUB_OFFLINE="1",
            PYTHONUNBUFFERED="1",
            WAKEMARK_HOME=str(self.workdir / "home"),
            WAKEMARK_HOST="127.0.0.1",
            WAKEMARK_PORT=str(self.port),
            WAKEMARK_TOKEN=self.token,
        )
        if self.database_url:
            env["WAKEMARK_DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["WAKEMARK_REDIS_URL"] = self.redis_url
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60.0) -> Stack:
        try:
            if self.deployment:
                least_privilege(self.database_url or "", self.redis_url)
                self._migrate()
            self._launch("api", wakemark_argv("serve"))
            if self.deployment and self.redis_url:
                for name in WORKERS:
                    self.start_worker(name)
                self._launch("beat", wakemark_argv(*BEAT))
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _migrate(self) -> None:
        # compose's one-shot `migrate` service: everything else waits for it to succeed.
        log = self.log_dir / "migrate.log"
        with open(log, "ab") as fh:
            done = subprocess.run(
                wakemark_argv("migrate"), stdout=fh, stderr=subprocess.STDOUT, env=self.env()
            )
        if done.returncode != 0:
            raise StackError(f"migrate exited {done.returncode}:\n{log.read_text()}")

    def _launch(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.log_dir)
        proc.start(self.env(), self.workdir)
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str) -> Proc:
        argv = wakemark_argv(*WORKERS[name])
        if self.worker_concurrency:
            argv += ["--concurrency", str(self.worker_concurrency)]
        return self._launch(name, argv)

    def wait_healthy(self, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                status, body = self.request("GET", "/health")
                if status == 200:
                    return body
                last = body
            except OSError as exc:
                last = exc
            time.sleep(0.2)
        raise StackError(f"API not healthy after {timeout:.0f}s ({last!r})\n{self.logs()}")

    def check_alive(self) -> None:
        dead = [p for p in self.procs.values() if p.popen is not None and not p.alive]
        if dead:
            codes = ", ".join(f"{p.name} exited {p.popen.returncode}" for p in dead if p.popen)
            raise StackError(f"{codes}\n{self.logs()}")

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        status, reply, _ = self.exchange(method, path, body, headers)
        return status, reply

    def exchange(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any, Any]:
        """(status, decoded body, response headers)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None, resp.headers
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw), err.headers
            except ValueError:
                return err.code, raw.decode(errors="replace"), err.headers

    def logs(self, lines: int = 40) -> str:
        parts = [f"--- {p.name} ({p.log_path})\n{p.tail(lines)}" for p in self.procs.values()]
        return "\n".join(parts)

    def stop(self) -> None:
        # All at once (each shuts down gracefully in parallel), then wait for each.
        procs = list(self.procs.values())
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.stop()


def main() -> int:
    """``make stack``: run the deployment's processes in the foreground until Ctrl-C."""
    database_url = os.environ.get("WAKEMARK_DATABASE_URL")
    redis_url = os.environ.get("WAKEMARK_REDIS_URL")
    if not database_url or not redis_url:
        print("make stack: set WAKEMARK_DATABASE_URL and WAKEMARK_REDIS_URL", file=sys.stderr)
        return 2
    passthrough = {k: v for k, v in os.environ.items() if k.startswith("WAKEMARK_")}
    workdir = Path(
        os.environ.get("WAKEMARK_STACK_DIR") or tempfile.mkdtemp(prefix="wakemark-stack-")
    )
    stack = Stack(
        workdir,
        database_url=database_url,
        redis_url=redis_url,
        port=int(passthrough.pop("WAKEMARK_PORT", "37800")),
        token=passthrough.pop("WAKEMARK_TOKEN", None),
        env=passthrough,
        worker_concurrency=None,
    )
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    stack.start()
    print(f"wakemark stack up at {stack.url} (logs in {stack.log_dir}); Ctrl-C stops it")
    if "WAKEMARK_TOKEN" not in os.environ:
        print(f"token: {stack.token}")
    try:
        while not stopping:
            stack.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    except StackError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
