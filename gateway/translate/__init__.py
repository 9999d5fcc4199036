"""Translation between the Anthropic Messages API and OpenAI chat completions, on plain data.

The gateway serves `/v1/messages` in front of engines that speak chat completions: a request is
translated with `messages_to_chat`, a whole answer back with `chat_to_messages_response`, and a stream
frame by frame with `ChatToMessagesStream`. Pure functions and one small state machine: no I/O.
"""

from gateway.translate.messages_request import messages_to_chat
from gateway.translate.messages_response import chat_to_messages_response, stop_reason_of
from gateway.translate.messages_stream import ChatToMessagesStream

__all__ = ["ChatToMessagesStream", "chat_to_messages_response", "messages_to_chat", "stop_reason_of"]
