"""llama-server's introspection: /props (what the server was started with) and /slots (what each slot last
ran), as a real llama-server at commit 0c1e570 answered them."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gateway.sim.flavors.base import JSON, EngineView
from gateway.sim.flavors.request import RequestPlan
from gateway.sim.fleet import EngineSpec

BUILD = "b7200-0c1e570"  # b<build>-<short commit>, as llama.cpp prints its build_info


# twin `speculative.method` -> llama.cpp `--spec-type` value (common/speculative.cpp)
_SPEC_TYPES = {
    "mtp": "draft-mtp",
    "nextn": "draft-mtp",
    "eagle": "draft-eagle3",
    "eagle3": "draft-eagle3",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "draft": "draft-simple",
    "draft_model": "draft-simple",
    "standalone": "draft-simple",
    "ngram": "ngram-simple",
}
_LLAMA_SPEC_TYPES = frozenset(
    {
        "draft-simple",
        "draft-eagle3",
        "draft-mtp",
        "draft-dflash",
        "draft-dspark",
        "ngram-simple",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-mod",
        "ngram-cache",
    }
)


def _spec_type(method: str) -> str:
    name = method.lower()
    if name in _LLAMA_SPEC_TYPES:
        return name
    return _SPEC_TYPES.get(name, "draft-simple")


def _slot_spec_types(spec: EngineSpec) -> str:
    """`speculative.types` of a slot that ran a task: a comma string that starts with "none"."""
    speculative = spec.perf.speculative
    return f"none,{_spec_type(speculative.method)}" if speculative else "none"


def ftype(bytes_per_weight: float) -> str:
    """GGUF file type name (llama_model_ftype_name) closest to the checkpoint's bits per weight."""
    bits = bytes_per_weight * 8
    for limit, name in ((5.25, "Q4_K - Medium"), (6.1, "Q5_K - Medium"), (7.5, "Q6_K"), (12.0, "Q8_0")):
        if bits < limit:
            return name
    return "BF16"


def server_props(engine: EngineView) -> JSON:
    spec = engine.spec
    return {
        "default_generation_settings": {
            # The per-request defaults: "none" even when the server was started with --spec-type,
            # and no speculative.n_max/n_min/p_min (observed on llama-server 0c1e570).
            "params": {"n_predict": -1, "temperature": 0.8, "speculative.types": "none"},
            "n_ctx": spec.context_length,
        },
        "total_slots": spec.perf.max_num_seqs,
        "model_alias": spec.served_model_name,
        "model_path": spec.model_path,
        "model_ftype": ftype(spec.perf.bytes_per_weight),
        "modalities": {"vision": spec.vision, "video": False, "audio": False},
        "media_marker": "<__media__>",
        "chat_template": "{%- for message in messages %}...{%- endfor %}",
        "chat_template_caps": {},
        "bos_token": "",
        "eos_token": "<|im_end|>",
        "build_info": BUILD,
        "is_sleeping": False,
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "ui": True,
        "ui_settings": {},
        "cors_proxy_enabled": False,
    }


@dataclass(frozen=True, slots=True)
class _SlotTask:
    """What /slots shows about the last task a slot ran."""

    id_task: int
    prompt_tokens: int
    completion_tokens: int
    n_predict: int
    temperature: float


class SlotLedger:
    """The most recent planned tasks, one per slot. The engine model does not track slots, so the
    last `total_slots` tasks stand for what the slots last ran; the engine's own request counter
    decides how many slots have run anything (it restarts at 0 with the engine)."""

    def __init__(self) -> None:
        self._next_id = 0
        self._recent: deque[_SlotTask] = deque()

    def record(self, plan: RequestPlan, n_slots: int) -> None:
        req = plan.request
        self._recent.append(
            _SlotTask(
                id_task=self._next_id,
                prompt_tokens=plan.prompt.tokens,
                completion_tokens=plan.completion_tokens,
                n_predict=req.max_tokens if req.max_tokens is not None else -1,
                temperature=req.temperature,
            )
        )
        self._next_id += 1
        while len(self._recent) > n_slots:
            self._recent.popleft()

    def slots(self, engine: EngineView) -> list[JSON]:
        spec = engine.spec
        n_slots = spec.perf.max_num_seqs
        used = min(engine.observed.requests_total, n_slots, len(self._recent))
        # Newest first, so the busy slots (the lowest ids, as the model reports only a count) hold
        # the tasks still running.
        tasks = list(reversed(self._recent))[:used]
        busy = engine.stats.running
        out: list[JSON] = []
        for i in range(n_slots):
            slot: JSON = {
                "id": i,
                "n_ctx": spec.context_length,
                "speculative": spec.perf.speculative is not None,
                "is_processing": i < busy,
            }
            if i < used:
                slot.update(_task_fields(tasks[i], spec, processing=i < busy))
            out.append(slot)
        return out


def _task_fields(task: _SlotTask, spec: EngineSpec, processing: bool) -> JSON:
    """The keys a slot gains once it has run a task (absent on a fresh slot)."""
    return {
        "id_task": task.id_task,
        "n_prompt_tokens": task.prompt_tokens,
        "n_prompt_tokens_processed": task.prompt_tokens,
        "n_prompt_tokens_cache": 0,
        "params": {
            "n_predict": task.n_predict,
            "temperature": task.temperature,
            "speculative.types": _slot_spec_types(spec),
        },
        "next_token": [
            {
                "has_next_token": processing,
                "has_new_line": False,
                "n_remain": -1,
                "n_decoded": task.completion_tokens,
            }
        ],
    }
