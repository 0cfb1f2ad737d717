"""What Amazon Bedrock's two streaming operations share: their paths, their provider name and
their exception frames (``bedrock_converse.py``, ``bedrock_invoke.py``).

Both answer with an AWS event stream (``_core.eventstream``) whose union holds, besides its
events, the operation's modelled exceptions, sent as exception frames (AWS, Amazon Bedrock API
reference, "ConverseStreamOutput" and "ResponseStream",
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ResponseStream.html;
botocore ``botocore/data/bedrock-runtime/2023-09-30/service-2.json``).
"""

from __future__ import annotations

from urllib.parse import unquote

from .._core.events import SSEEvent
from .._core.eventstream import ERROR_EVENT, EXCEPTION_EVENT
from .._core.state import StreamState

__all__ = ["PROVIDER", "bedrock_model", "on_exception"]

#: ``gen_ai.provider.name`` for Amazon Bedrock (the GenAI conventions' ``aws.bedrock``).
PROVIDER = "aws.bedrock"

# The union member that is the caller's throttling: the quota an HTTP 429 reports at the
# headers. Every other exception (``internalServerException``, ``modelStreamErrorException``,
# ``modelTimeoutException``, ``serviceUnavailableException``, ``validationException``, and any a
# later service model adds: botocore raises on every exception frame) is the provider's.
_THROTTLING = "throttlingException"


def bedrock_model(path: str, operation: str) -> str | None:
    """The model id of a Bedrock runtime path ``/model/{modelId}/{operation}``, percent-decoded
    (an ARN's ``:`` and ``/`` travel encoded), or None when the path is not that."""
    if not (path.startswith("/model/") and path.endswith(operation)):
        return None
    model = path[len("/model/") : -len(operation)]
    return unquote(model) if model else None


def on_exception(event: SSEEvent, state: StreamState) -> bool:
    """Judge ``event`` if it is an exception or error frame (the stream's last word): a provider
    error named by its exception type (or an error frame's code), ``rate_limited`` for
    throttling. False for any other event."""
    if event.event == EXCEPTION_EVENT or event.event == ERROR_EVENT:
        state.provider_error(event.data, rate_limited=event.data == _THROTTLING)
        return True
    return False
