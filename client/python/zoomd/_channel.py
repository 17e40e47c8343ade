"""Channel setup shared by Client and AsyncClient: target, TLS, API key."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc

from zoomd.errors import invalid

#: The largest message either way (the server's default --max_message_bytes).
MAX_MESSAGE_BYTES = 64 << 20


@dataclass
class TLS:
    """TLS to the server. ca: the PEM file (or bytes) of the CA the server's
    certificate must chain to (None: the system's roots); cert and key: this
    client's certificate and key for mutual TLS; server_name: the name to
    verify instead of the target's host."""
    ca: Union[None, str, bytes] = None
    cert: Union[None, str, bytes] = None
    key: Union[None, str, bytes] = None
    server_name: Optional[str] = None


def _pem(x: Union[None, str, bytes], what: str) -> Optional[bytes]:
    if x is None:
        return None
    if isinstance(x, bytes):
        return x
    try:
        with open(os.fspath(x), "rb") as f:
            return f.read()
    except OSError as e:
        raise invalid(f"tls.{what}: cannot read {x!r}: {e.strerror}") from None


def channel_args(tls: Any) -> Tuple[Optional[grpc.ChannelCredentials], List[Tuple[str, Any]]]:
    """(credentials or None for plaintext, channel options)."""
    options: List[Tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # Our own retries (RetryPolicy): not gRPC's transparent ones on top.
        ("grpc.enable_retries", 0),
    ]
    if tls is None or tls is False:
        return None, options
    if isinstance(tls, grpc.ChannelCredentials):
        return tls, options
    if tls is True:
        tls = TLS()
    if isinstance(tls, (str, os.PathLike)):
        tls = TLS(ca=os.fspath(tls))
    if not isinstance(tls, TLS):
        raise invalid(f"tls: expected True, a CA file path, a zoomd.TLS or grpc credentials; got "
                      f"{type(tls).__name__}")
    if (tls.cert is None) != (tls.key is None):
        raise invalid("tls: mutual TLS needs both cert and key")
    creds = grpc.ssl_channel_credentials(root_certificates=_pem(tls.ca, "ca"),
                                         private_key=_pem(tls.key, "key"),
                                         certificate_chain=_pem(tls.cert, "cert"))
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return creds, options


def metadata(api_key: Optional[str]) -> Sequence[Tuple[str, str]]:
    if api_key is None:
        api_key = os.environ.get("ZOOM_API_KEY") or None
    if api_key is None:
        return ()
    if not isinstance(api_key, str) or not api_key.strip() or "\n" in api_key:
        raise invalid("api_key: expected the key as a one-line string")
    return (("authorization", f"Bearer {api_key.strip()}"),)
