"""The `backends:` and `pools:` sections: the engines the gateway sends to, the model names clients send."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from gateway.records.endpoints import Endpoint
from gateway.redact import without_credentials
from gateway.settings.strict import Strict

Flavor = Literal["vllm", "sglang", "llamacpp", "openai"]


class BackendConfig(Strict):
    """One engine instance the gateway may send requests to."""

    name: str = Field(min_length=1)
    # May carry basic-auth credentials (http://user:password@host:port), sent to the engine only.
    url: str = Field(description="base URL without /v1, e.g. http://127.0.0.1:8101")
    flavor: Flavor = "vllm"
    # Sent as "Authorization: Bearer ..." to this backend only; never shown (repr included).
    api_key: str | None = Field(default=None, repr=False)
    max_concurrency: int | None = Field(default=None, ge=1)
    # Declared capabilities win over what the prober discovers (e.g. a vLLM vision build: /v1/models
    # does not say whether it can see).
    context_length: int | None = Field(default=None, ge=1)
    modalities: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()
    # Backends naming the same device share one accelerator: their loads add up (adaptive routing
    # predicts at the device's load, since a request on one slows the other down).
    device: str | None = None
    # Seconds this backend takes from start to ready, until the gateway has seen it warm up (then it
    # learns them); default: its flavor's (backends/flavors.py). Feeds the warm-up ETA and Retry-After.
    warmup_s: float | None = Field(default=None, gt=0)
    # The client APIs it serves natively (chat, messages, responses, embeddings, ...); default: its
    # flavor's (backends/flavors.py). Requests for an API no backend of the pool serves get a 400.
    endpoints: frozenset[Endpoint] | None = None
    # A backend serving chat but not Messages: the gateway translates /v1/messages to chat and back.
    # None: on for such backends; false: Messages never go there.
    translate_messages: bool | None = None

    def auth_headers(self) -> dict[str, str]:
        """The header carrying its api_key to it (none without one)."""
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    def __repr_args__(self) -> Any:
        # A config printed in a log or a traceback shows the URL without its credentials.
        for name, value in super().__repr_args__():
            yield name, without_credentials(value) if name == "url" and isinstance(value, str) else value

    @field_validator("api_key")
    @classmethod
    def _one_credential(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A request carries one Authorization header: the key's Bearer or the URL's basic auth, never
        both (the HTTP client refuses the pair, so the engine would never be reached)."""
        url = info.data.get("url")
        if value and isinstance(url, str) and "@" in urlsplit(url).netloc:
            raise ValueError(
                "cannot be combined with credentials in the backend's url (user:password@): the engine "
                "gets one Authorization header, so keep either the api_key or the url's credentials"
            )
        return value


class PoolConfig(Strict):
    """A model name clients send (plus aliases), served by a list of backends."""

    model: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    backends: tuple[str, ...] = Field(min_length=1)
    # backend name -> the model name that backend expects, when it differs from `model`.
    served_names: dict[str, str] = Field(default_factory=dict)

    def served_name(self, backend: str) -> str:
        return self.served_names.get(backend, self.model)
