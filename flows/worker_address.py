"""Worker addresses: ``--listen HOST:PORT`` and ``privpipe+https://H1:P1,H2:P2`` runner specs.

Plain HTTP is allowed to and from loopback addresses only (`is_loopback`).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from schemas.errors import ParameterError

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port).

    Raises:
        ParameterError: not HOST:PORT with a port in 1..65535.
    """
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ParameterError(f"--listen must be HOST:PORT; got {listen!r}")
    return host.strip("[]"), int(port)


PREFIXES = ("privpipe+https://", "privpipe+http://")


def worker_urls(spec: str) -> list[str]:
    """The worker base URLs of a ``privpipe+https://H1:P1,H2:P2`` spec.

    ``privpipe+http://`` (plain HTTP) is accepted for loopback workers only
    (those started with ``--insecure-loopback``).

    Raises:
        ParameterError: not such a spec, an address without a port, or plain HTTP
            to a non-loopback host.
    """
    scheme = next((p for p in PREFIXES if spec.startswith(p)), None)
    if scheme is None:
        raise ParameterError(f"not a privpipe worker runner: {spec!r}")
    proto = scheme[len("privpipe+"):-3]
    urls = []
    for address in spec[len(scheme):].split(","):
        parts = urlsplit(f"{proto}://{address.strip()}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or parts.path not in ("", "/"):
            raise ParameterError(f"task runner {spec!r}: {address!r} is not HOST:PORT")
        if proto == "http" and not is_loopback(parts.hostname):
            raise ParameterError(f"task runner {spec!r}: plain HTTP only to a loopback worker "
                                 "(use privpipe+https:// for other hosts)")
        urls.append(f"{proto}://{parts.netloc}")
    return urls
