"""A small S3 client for the embedded object store: AWS Signature V4 signed requests, buckets.

Enough S3 for the services and the tests that check the store itself (create and list buckets, conditional PUTs);
the library reaches object stores through delta-rs and obstore, never through this. Runs on the machine that
starts the store (CLI, test session, benchmark), never on Spark executors.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import quote
from xml.etree import ElementTree

from sparkonce.errors import StorageError

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_XMLNS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Target(Protocol):
    """Where and as whom requests go (a :class:`~sparkonce_local.services.storage.StorageInfo`)."""

    @property
    def endpoint(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def access_key(self) -> str: ...
    @property
    def secret_key(self) -> str: ...


@dataclass(frozen=True)
class S3Response:
    """The answer to one signed S3 request."""

    status: int
    headers: dict[str, str]
    body: bytes


def s3_request(
    target: S3Target,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> S3Response:
    """Send one AWS Signature V4 signed request to the store (``path`` is ``/bucket`` or ``/bucket/key``).

    Raises:
        StorageError: the store could not be reached (any HTTP answer, even an error, is returned).
    """
    host = target.endpoint.removeprefix("http://")
    now = datetime.now(UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    payload_hash = hashlib.sha256(body).hexdigest()
    signed = {
        **{name.lower(): value.strip() for name, value in (headers or {}).items()},
        "host": host,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_hash,
    }
    signed_names = ";".join(sorted(signed))
    canonical_uri = quote(path, safe="/-_.~")
    canonical_query = "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}" for name, value in sorted((query or {}).items())
    )
    canonical = "\n".join(
        [
            method,
            canonical_uri,
            canonical_query,
            "".join(f"{name}:{signed[name]}\n" for name in sorted(signed)),
            signed_names,
            payload_hash,
        ]
    )
    scope = f"{amz_date[:8]}/{target.region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{target.secret_key}".encode()
    for part in (amz_date[:8], target.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={target.access_key}/{scope}, SignedHeaders={signed_names}, Signature={signature}"
    )
    request_uri = canonical_uri + (f"?{canonical_query}" if canonical_query else "")
    connection = http.client.HTTPConnection(host, timeout=timeout)
    try:
        connection.request(method, request_uri, body=body, headers={**signed, "authorization": authorization})
        response = connection.getresponse()
        return S3Response(
            status=response.status,
            headers={name.lower(): value for name, value in response.getheaders()},
            body=response.read(),
        )
    except OSError as err:
        raise StorageError(f"object store at {target.endpoint} is unreachable: {err}") from err
    finally:
        connection.close()


def create_bucket(target: S3Target, name: str, *, exist_ok: bool = False) -> str:
    """Create bucket ``name`` (S3 CreateBucket) and return its URI ``s3://name``.

    Raises:
        StorageError: the name is not a valid bucket name, the store refused, or the bucket exists and
            ``exist_ok`` is false.
    """
    if not _BUCKET_NAME.match(name) or ".." in name:
        raise StorageError(f"{name!r} is not a valid bucket name (3-63 of a-z, 0-9, '.', '-')")
    answer = s3_request(target, "PUT", f"/{name}")
    if answer.status == 409 and exist_ok:
        return f"s3://{name}"
    if answer.status != 200:
        raise StorageError(f"cannot create bucket {name!r} at {target.endpoint}: {describe_answer(answer)}")
    return f"s3://{name}"


def list_buckets(target: S3Target) -> list[str]:
    """The names of the store's buckets (S3 ListBuckets).

    Raises:
        StorageError: the store did not answer or refused.
    """
    answer = s3_request(target, "GET", "/")
    if answer.status != 200:
        raise StorageError(f"cannot list buckets at {target.endpoint}: {describe_answer(answer)}")
    root = ElementTree.fromstring(answer.body)
    return sorted(node.text or "" for node in root.iter(f"{_S3_XMLNS}Name"))


def describe_answer(answer: S3Response) -> str:
    """``HTTP <status> <S3 error code> <message>`` of an error answer."""
    code = message = ""
    with contextlib.suppress(ElementTree.ParseError):
        root = ElementTree.fromstring(answer.body)
        code = root.findtext("Code") or ""
        message = root.findtext("Message") or ""
    return f"HTTP {answer.status} {code} {message}".strip()


__all__ = ["S3Response", "S3Target", "create_bucket", "describe_answer", "list_buckets", "s3_request"]
