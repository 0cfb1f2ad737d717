"""What the application sees from each of the demo's clients, per scenario (as measured)."""

from __future__ import annotations

from otelsse._demo.run import Job

__all__ = ["PROVIDER_ERROR_RAISES", "client_raises"]

#: Clients that raise on an error event inside a 200 stream: the SDKs that turn it into an
#: exception (botocore raises ``EventStreamError`` on every exception frame). The openai SDK
#: yields the Responses API's ``error`` event as a typed event instead; plain HTTP clients only
#: read lines or bytes.
PROVIDER_ERROR_RAISES = frozenset(
    {
        ("openai.chat_completions", "openai"),
        ("openai.chat_completions", "openai-async"),
        ("anthropic.messages", "anthropic"),
        ("anthropic.messages", "anthropic-async"),
        ("bedrock.converse_stream", "boto3"),
    }
)


def client_raises(job: Job, framing: str | None = None) -> bool:
    """Whether the demo's client for ``job`` raises; ``framing`` ("chunked" or "close", how the
    cut body was framed) matters only when truncated."""
    if job.scenario in ("rate_limited", "overloaded", "unauthorized", "bad_gateway", "timeout"):
        return True
    if job.scenario == "provider_error":
        return (job.route, job.client) in PROVIDER_ERROR_RAISES
    if job.scenario == "truncated":
        # A chunked body without its last chunk is an error to every client (botocore passes
        # urllib3's ProtocolError on); a close-delimited body ends at a clean EOF, which only
        # otelsse notices (botocore's event reader stops quietly inside a frame).
        return framing == "chunked"
    return False
