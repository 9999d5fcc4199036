"""The OpenAI wire shapes the gateway accepts and answers, as pydantic models, for GET /openapi.json.

Only the schema is used: the request path never validates a body with these models (it parses the few
fields it routes on and forwards the client's bytes). Every object allows extra properties because any
field an engine understands (vLLM's `top_k`, SGLang's `regex`, llama.cpp's `cache_prompt`, ...) passes
through to it untouched.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class Open(BaseModel):
    """An object that also takes fields not listed (they are forwarded to the engine)."""

    model_config = ConfigDict(extra="allow")


# -- content parts ---------------------------------------------------------------------------------------


class TextPart(Open):
    type: Literal["text"]
    text: str


class ImageUrl(Open):
    url: str = Field(description="an http(s) URL or a data: URL (base64)")
    detail: Literal["auto", "low", "high"] | None = None


class ImageUrlPart(Open):
    """An image: only backends that can see take it (the `modalities` of a backend)."""

    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(Open):
    data: str = Field(description="base64 audio")
    format: str = Field(description="e.g. wav, mp3")


class InputAudioPart(Open):
    type: Literal["input_audio"]
    input_audio: InputAudio


# The typed parts above; any other `type` is an engine's own part. Excluding these keeps a malformed
# image part (no `image_url`) from passing as an "other" part.
_NOT_TYPED: dict[str, JsonValue] = {"enum": ["text", "image_url", "input_audio"]}


class OtherPart(Open):
    """An engine-specific part (vLLM's `video_url`, `audio_url`, `image_embeds`, ...), forwarded as is."""

    type: str = Field(json_schema_extra={"not": _NOT_TYPED})


ContentPart = TextPart | ImageUrlPart | InputAudioPart | OtherPart
TextContent = str | list[TextPart]

# -- tools -----------------------------------------------------------------------------------------------


class FunctionDefinition(Open):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="the arguments, as a JSON Schema object")
    strict: bool | None = None


class Tool(Open):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Open):
    name: str


class NamedToolChoice(Open):
    type: Literal["function"]
    function: FunctionName


class FunctionCall(Open):
    name: str
    arguments: str = Field(description="the arguments, as a JSON string")


class ToolCall(Open):
    id: str
    type: Literal["function"]
    function: FunctionCall


# -- messages --------------------------------------------------------------------------------------------


class SystemMessage(Open):
    role: Literal["system"]
    content: TextContent
    name: str | None = None


class DeveloperMessage(Open):
    role: Literal["developer"]
    content: TextContent
    name: str | None = None


class UserMessage(Open):
    role: Literal["user"]
    content: str | list[ContentPart]
    name: str | None = None


class AssistantMessage(Open):
    role: Literal["assistant"]
    content: TextContent | None = None
    tool_calls: list[ToolCall] | None = None
    name: str | None = None


class ToolMessage(Open):
    role: Literal["tool"]
    content: TextContent
    tool_call_id: str


class FunctionMessage(Open):
    """Deprecated by OpenAI in favour of `tool`; still accepted by the engines."""

    role: Literal["function"]
    content: str | None
    name: str


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]

# -- request options -------------------------------------------------------------------------------------


class StreamOptions(Open):
    include_usage: bool | None = Field(
        None,
        description="the gateway sets it upstream to meter tokens and strips the usage frame unless asked",
    )


class JsonSchemaFormat(Open):
    name: str
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="with type json_schema")


Stop = str | list[str] | None


class GenerationRequest(Open):
    """Fields shared by both generation routes."""

    model: str = Field(description="a pool's model name or one of its aliases (GET /v1/models)")
    max_tokens: int | None = Field(None, ge=1, description="output budget; the router counts it")
    stream: bool | None = Field(None, description="server-sent events, ending with `data: [DONE]`")
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, description="OpenAI takes up to 2; engines more")
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1)
    stop: Stop = None
    seed: int | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    top_k: int | None = Field(None, description="engine extension (vLLM, SGLang, llama.cpp)")
    min_p: float | None = Field(None, ge=0, le=1, description="engine extension (vLLM, SGLang, llama.cpp)")
    repetition_penalty: float | None = Field(None, description="engine extension (vLLM, SGLang)")


class ChatCompletionRequest(GenerationRequest):
    """POST /v1/chat/completions. Classified into a profile and routed; the body is forwarded as sent."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(
        None, ge=1, description="wins over max_tokens when both are set"
    )
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0)
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description='engine extension, e.g. {"enable_thinking": false} for Qwen3'
    )


class CompletionRequest(GenerationRequest):
    """POST /v1/completions (text completion)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool | None = None
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0)
    best_of: int | None = Field(None, ge=1)


# -- responses -------------------------------------------------------------------------------------------


class Usage(Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ResponseMessage(Open):
    role: Literal["assistant"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = Field(None, description="engines with a reasoning parser")


class ChatChoice(Open):
    index: int
    message: ResponseMessage
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


class ChatCompletion(Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class ChunkChoice(Open):
    index: int
    delta: dict[str, Any] = Field(description="role, content, tool_calls, reasoning_content: each optional")
    finish_reason: str | None = None


class ChatCompletionChunk(Open):
    """One `data:` frame of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class CompletionChoice(Open):
    index: int
    text: str
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


class Completion(Open):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(Open):
    id: str = Field(description="the pool's model name")
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int | None = Field(description="the largest context any backend of the pool takes")
    aliases: list[str]
    backends: list[str]


class ModelList(Open):
    object: Literal["list"]
    data: list[ModelCard]


class ErrorDetail(Open):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(Open):
    """Every error the gateway answers itself, unknown routes and methods included (the openai client
    shape). Errors an engine answers (a context-length 400, say) pass through as the engine wrote them."""

    error: ErrorDetail
