"""A throw-away PostgreSQL server for the tune tests: initdb + pg_ctl in a temporary directory,
listening on a Unix socket there (no TCP), stopped at the end of the session.

``.ci/run`` installs the server from Debian packages (``apt-get install -y postgresql``); its
binaries live in /usr/lib/postgresql/<version>/bin. initdb and postgres refuse to run as root, so
as root they run as the ``postgres`` user (``runuser``). Without the binaries or the psycopg2
driver the tests that need the server are skipped with the reason."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(cands[-1]).parent if cands else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL of a fresh PostgreSQL database served from a temporary directory."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 (the PostgreSQL driver) is not installed")
    bindir = _pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found; .ci/run installs them with apt-get install postgresql")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="foxhunt-pg-"))  # under /tmp: the postgres user can reach it
    data, port = base / "data", _free_port()
    prefix: list[str] = []
    if as_root:
        shutil.chown(base, user="postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    run = lambda *cmd: subprocess.run([*prefix, *cmd], check=True, capture_output=True, text=True, timeout=120)  # noqa: E731
    try:
        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60",
            "-o", f"-k {base} -c listen_addresses='' -p {port} -c fsync=off", "start")
    except subprocess.CalledProcessError as exc:
        log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{log}") from None
    try:
        yield f"postgresql+psycopg2://postgres@/postgres?host={base}&port={port}"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True,
                       timeout=120)
        shutil.rmtree(base, ignore_errors=True)
