"""Ray addresses: which Ray a run joins, and whether an address the user gave can be one (its form,
and for a host and port, a head answering there), checked before anything is written and before
Ray is imported: Ray itself would retry an address that does not answer for minutes, or fail with a
traceback after the results folder was locked.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket

from banditsweep.workers.errors import InputError, RayUnreachableError

RAY_ADDRESS_FORMS = ("allowed: HOST:PORT (a Ray head's address, e.g. 127.0.0.1:6379), ray://HOST:PORT (Ray Client), "
                     "auto (the Ray running on this machine) or local (a new Ray here)")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$")


def ray_address(address: str | None) -> str | None:
    """The Ray address a run joins: ``address``, else ``$RAY_ADDRESS``; None: an embedded Ray."""
    return address if address is not None else (os.environ.get("RAY_ADDRESS") or None)


def embedded(address: str | None) -> bool:
    """Whether a run given ``address`` (already resolved by :func:`ray_address`) starts its own Ray."""
    return not address or address == "local"


def check_address(address: str, source: str) -> None:
    """``address`` is a form Ray accepts and, for a host and port, a head answers there. ``source``
    names where the address came from in the message (``--address X``, ``$RAY_ADDRESS=X``)."""
    if embedded(address):
        return
    if address == "auto":
        try:
            from ray._private.services import get_ray_address_from_environment

            found = get_ray_address_from_environment("auto", None)
        except (ImportError, AttributeError):
            return   # Ray's lookup is private: without it, ray.init reports what it finds
        except ConnectionError:
            found = None
        if not found:
            raise InputError(f"{source}: no Ray is running on this machine (start one with `ray start --head`), "
                             f"or leave --address out to run on an embedded Ray")
        address = found
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    valid_host = bool(host) and (_HOST.match(host) is not None or _is_ip(host))
    if "://" in rest or not sep or not valid_host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"{source}: not a Ray address; {RAY_ADDRESS_FORMS}")
    check_reachable(f"{'[' + host + ']' if ':' in host else host}:{port}")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_reachable(address: str, timeout: float = 5.0) -> str | None:
    """A ``host:port`` address must accept a connection within ``timeout`` seconds: Ray itself keeps
    retrying an address that does not answer for minutes. Returns the host (None for addresses
    Ray resolves itself, such as ``auto`` or ``ray://``)."""
    if "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as error:
        raise RayUnreachableError(f"--address {address}: no Ray head answers there ({error}); start one with "
                                  "`ray start --head`, or leave --address out to run on an embedded Ray") from None
    return host
