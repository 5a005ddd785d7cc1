"""Which local process owns a TCP connection, read from /proc (Linux; no psutil here).

The chaos suite uses it to find the worker process behind a Postgres backend
(`pg_stat_activity.client_port`), so it can freeze exactly the process that holds a lock.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _socket_inodes(local_port: int, remote_port: int) -> set[str]:
    """Inodes of the IPv4/IPv6 sockets from `local_port` to `remote_port`."""
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        path = PROC / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == local_port and (
                int(remote.rsplit(":", 1)[1], 16) == remote_port
            ):
                found.add(inode)
    return found


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def owner_of_connection(local_port: int, remote_port: int, groups: set[int]) -> int | None:
    """The pid, among the processes of the process `groups`, that holds the socket from
    `local_port` to `remote_port`; None when none does (the connection closed)."""
    links = {f"socket:[{inode}]" for inode in _socket_inodes(local_port, remote_port)}
    if not links:
        return None
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or process_group(int(entry.name)) not in groups:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # exited meanwhile
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in links:
                    return int(entry.name)
            except OSError:
                continue
    return None
