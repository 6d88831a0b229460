"""How a source URI splits into its scheme, its location and its query."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from edge_sdk.core.errors import SourceConfigError


class UnparsableUri(SourceConfigError):
    """A source URI that is not a URI at all (e.g. an unclosed '[' of an IPv6 host)."""

    def __init__(self, uri: str, reason: str):
        super().__init__(f"source uri: cannot parse {uri}: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class SourceUri:
    scheme: str
    """The scheme in lower case; `file` for a plain path, `v4l2` for a bare camera index."""
    location: str
    """What follows `scheme://` up to the query: a path, a host and path, a device, a pipeline."""
    query: str
    """The query text after '?', as written (empty when there is none)."""

    def query_items(self) -> list[tuple[str, str]]:
        """(key, value) pairs of the query, decoded and in order; `key=` keeps its empty value."""
        return parse_qsl(self.query, keep_blank_values=True)


def split_source_uri(uri: str) -> SourceUri:
    """A pipeline's source URI in parts; UnparsableUri (a SourceConfigError) when it is not a URI."""
    if uri.startswith("gst://"):  # a pipeline, not a URL: caps hold '/', '?' and '[' freely
        return SourceUri("gst", uri[len("gst://") :], "")
    if uri.strip().isdigit():
        return SourceUri("v4l2", uri.strip(), "")
    try:
        parts = urlsplit(uri)
    except ValueError as error:
        raise UnparsableUri(uri, str(error)) from None
    scheme = parts.scheme or "file"
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = "file"
    location = uri if not parts.scheme else (parts.netloc + parts.path)
    return SourceUri(scheme, location, parts.query)
