"""The exceptions of the zoomd client: one class per gRPC status code.

Every error the client raises is a :class:`ZoomError` carrying the gRPC
``code`` (a :class:`grpc.StatusCode`) and the server's ``message`` (which says
what to fix). Errors found before a request goes out (a wrong dimension, a
NaN, a 1-d array where a 2-d one is needed) are raised as the same classes
with ``client_side=True``; :class:`InvalidArgument` is also a
:class:`ValueError`, so ``except ValueError`` catches bad input too.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "ZoomError",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
]


class ZoomError(Exception):
    """An error of a zoomd call: the gRPC status code and the server's message."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 client_side: bool = False, method: str = "") -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        #: True when the client refused the call before sending it.
        self.client_side = client_side
        #: The RPC that failed (e.g. "Search"), "" for client-side errors.
        self.method = method
        self.stale_shape = False

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.code.name}: {self.message}"


class Cancelled(ZoomError):
    """The call was cancelled (CANCELLED)."""
    code = grpc.StatusCode.CANCELLED


class Unknown(ZoomError):
    """UNKNOWN."""
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ZoomError, ValueError):
    """Bad input (INVALID_ARGUMENT): the message says what to fix."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ZoomError, TimeoutError):
    """The deadline passed before the answer (DEADLINE_EXCEEDED)."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(ZoomError, LookupError):
    """An unknown collection, model or snapshot (NOT_FOUND)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ZoomError):
    """A collection or model of that name exists (ALREADY_EXISTS)."""
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ZoomError):
    """The API key may not make this call, e.g. a read key writing (PERMISSION_DENIED)."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ZoomError):
    """Over a limit: k, batch size, answer size, queue depth, disk (RESOURCE_EXHAUSTED)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(ZoomError):
    """The collection is not in a state for this call, e.g. too few points to build
    (FAILED_PRECONDITION)."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ZoomError):
    """ABORTED."""
    code = grpc.StatusCode.ABORTED


class OutOfRange(ZoomError):
    """OUT_OF_RANGE."""
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ZoomError):
    """The server does not have this call (UNIMPLEMENTED): an older zoomd."""
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ZoomError):
    """INTERNAL."""
    code = grpc.StatusCode.INTERNAL


class Unavailable(ZoomError, ConnectionError):
    """The server cannot be reached or is shutting down (UNAVAILABLE)."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(ZoomError):
    """Stored data failed its checks (DATA_LOSS)."""
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ZoomError):
    """No API key, or one the server does not know (UNAUTHENTICATED)."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[ZoomError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_for(code: grpc.StatusCode, message: str, method: str = "") -> ZoomError:
    """The exception of a failed call's status."""
    cls = _BY_CODE.get(code, Unknown)
    return cls(message, code=code, method=method)


def from_rpc_error(err: grpc.RpcError, method: str = "") -> ZoomError:
    """The exception of a grpc.RpcError (sync or asyncio)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return error_for(code or grpc.StatusCode.UNKNOWN, details or "", method)


def invalid(message: str, stale_shape: bool = False) -> InvalidArgument:
    """A client-side InvalidArgument (nothing was sent). stale_shape: it came
    from the cached collection shape (a dimension or dtype), which the client
    re-reads once before raising it."""
    e = InvalidArgument(message, client_side=True)
    e.stale_shape = stale_shape
    return e
