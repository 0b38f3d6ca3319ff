"""HTTP/1.1 response framing as uvicorn sends it: the status line and headers, and chunked-body frames."""

from __future__ import annotations

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def head(status: int, ctype: str, length: int | None, keep_alive: bool) -> bytes:
    """Status line and headers; `length` None means a chunked body."""
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        "server: uvicorn",
        f"content-type: {ctype}",
    ]
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def frame(payload: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)
