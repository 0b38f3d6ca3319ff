"""Names that reach a shell or another program's argv, checked where they enter: node names, the SSH user,
the container image, fabric addresses, network interfaces and RDMA devices.

Every checker takes (value, key_path) like the ones in schema.py and raises `Invalid`, so a bad name is
refused with the file and the key, whether it comes from recipe.toml or from an override
(`labkit.recipe.override`). Quoting keeps these values one argument each; these checks keep a value that
looks like an option (`-oProxyCommand=...`, `--privileged ...`) or carries a second command (`dgx5;id`)
out of the plan altogether.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import labkit.recipe.schema as s

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*", re.ASCII)
_USER = re.compile(r"[a-z_][a-z0-9_-]*\$?", re.ASCII)
_NETDEV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}", re.ASCII)
_HCA = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?::[0-9]{1,3})?", re.ASCII)

# The docker image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest].
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
IMAGE_NAME_MAX = 255  # the reference grammar's limit on the name part (domain and path)


def ip_address(value: Any, path: str) -> str:
    """A numeric IPv4 or IPv6 address (kept as written)."""
    text = s.string()(value, path)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise s.Invalid(path, f"expected a numeric IPv4 or IPv6 address, got {text!r}")
    return text


def node_name(value: Any, path: str) -> str:
    """A host name (RFC 1123 labels joined by dots, at most 253 characters) or a numeric IP address."""
    text = s.string()(value, path)
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    labels = text.split(".")
    if len(text) > 253 or not _HOST_NAME.fullmatch(text) or all(label.isdigit() for label in labels):
        raise s.Invalid(
            path,
            f"expected a host name (letters, digits and '-' in dot-separated labels, not starting or ending "
            f"with '-') or an IP address, got {text!r}",
        )
    return text


def user_name(value: Any, path: str) -> str:
    """A POSIX user name: [a-z_][a-z0-9_-]*[$]?, at most 32 characters."""
    text = s.string()(value, path)
    if len(text) > 32 or not _USER.fullmatch(text):
        raise s.Invalid(
            path,
            f"expected a user name (lower-case letters, digits, '_' and '-', starting with a letter or '_', "
            f"at most 32 characters), got {text!r}",
        )
    return text


def image_reference(value: Any, path: str) -> str:
    """A docker image reference: [registry[:port]/]path[:tag][@sha256:digest], path in lower case."""
    text = s.string()(value, path)
    m = _IMAGE.fullmatch(text)
    if not m or len(m.group("name")) > IMAGE_NAME_MAX:
        raise s.Invalid(
            path,
            "expected an image reference like 'registry:5000/org/name:tag' or 'org/name@sha256:<digest>' "
            f"(lower-case path, no spaces or options), got {text!r}",
        )
    return text


def interface_name(value: Any, path: str) -> str:
    """A Linux network interface name (at most 15 characters: letters, digits, '_', '.', '-')."""
    text = s.string()(value, path)
    if not _NETDEV.fullmatch(text):
        raise s.Invalid(
            path,
            f"expected a network interface name like 'enp1s0f1np1' (at most 15 characters), got {text!r}",
        )
    return text


def hca_name(value: Any, path: str) -> str:
    """An RDMA device name as NCCL_IB_HCA takes it, optionally with a port: 'rocep1s0f1', 'mlx5_0:1'."""
    text = s.string()(value, path)
    if not _HCA.fullmatch(text):
        raise s.Invalid(path, f"expected an RDMA device name like 'rocep1s0f1' or 'mlx5_0:1', got {text!r}")
    return text
