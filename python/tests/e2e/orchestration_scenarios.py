"""Agent Framework orchestrations checkpointed through the storage, in a fresh interpreter.

``test_orchestrations.py`` runs this file with ``sys.executable``, one scenario per process,
because the order in which ``agent_framework_orchestrations`` and ``agent_framework_mongodb``
are imported is the point: orchestrations registers its checkpoint types with Agent Framework
when it is imported, and import sorters put it (a third-party package) above this project's
own imports, so in an application it is imported first. pytest's own process has long imported
``agent_framework_mongodb`` (the conftest files do) and cannot show that order.

Each scenario runs twice in the same process, once on Agent Framework's
``InMemoryCheckpointStorage`` (the reference) and once on ``MongoDBCheckpointStorage`` over the
in-process engine. A run pauses for a human, then every later step is taken by a new workflow
instance (and, for MongoDB, a new storage object sharing only the client, as a new process
would) that resumes from the stored pause checkpoint. Agents and the Magentic manager are
scripted, so both runs are deterministic and comparable. The script prints one JSON summary;
the test asserts on it.

Usage: ``python orchestration_scenarios.py {magentic|group_chat}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast, overload

import agent_framework_orchestrations
from agent_framework import (
    AgentExecutorResponse,
    AgentResponse,
    BaseAgent,
    CheckpointStorage,
    Content,
    InMemoryCheckpointStorage,
    Message,
    Workflow,
    WorkflowCheckpoint,
    WorkflowEvent,
)
from agent_framework_orchestrations import (
    MAGENTIC_MANAGER_NAME,
    AgentRequestInfoResponse,
    GroupChatBuilder,
    GroupChatRequestSentEvent,
    GroupChatResponseReceivedEvent,
    GroupChatState,
    MagenticBuilder,
    MagenticContext,
    MagenticManagerBase,
    MagenticOrchestratorEvent,
    MagenticPlanReviewRequest,
    MagenticPlanReviewResponse,
    MagenticProgressLedger,
    MagenticProgressLedgerItem,
)
from pydantic import BaseModel

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.testing import InMemoryMongoClient

if TYPE_CHECKING:
    from agent_framework import AgentResponseUpdate, AgentRunInputs, AgentSession, ResponseStream

__all__ = ["SCENARIOS", "main"]

ORCHESTRATIONS = "agent_framework_orchestrations"
STORAGE_PACKAGE = "agent_framework_mongodb"

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"


def import_order() -> list[str]:
    """The order in which the two packages were first imported in this process.

    ``sys.modules`` is insertion-ordered and a module is entered into it when its import
    starts, so a package imported from within the other would come after it.
    """
    return [name for name in sys.modules if name in (ORCHESTRATIONS, STORAGE_PACKAGE)]


if import_order() != [ORCHESTRATIONS, STORAGE_PACKAGE]:
    raise SystemExit(
        f"{ORCHESTRATIONS} must be imported before {STORAGE_PACKAGE}; the order was {import_order()}"
    )


# -- Deterministic participants ---------------------------------------------------------


class ScriptedAgent(BaseAgent):
    """An agent whose reply is a pure function of the conversation it is given.

    A resumed run uses a new instance, so the reply must not depend on how often this
    instance was called, only on what the workflow hands it.
    """

    def __init__(self, name: str, description: str, reply: Callable[[Sequence[Message]], str]) -> None:
        super().__init__(id=name, name=name, description=description)
        self._reply = reply

    @overload
    def run(
        self,
        messages: AgentRunInputs | None = None,
        *,
        stream: Literal[False] = ...,
        session: AgentSession | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> Awaitable[AgentResponse[Any]]: ...

    @overload
    def run(
        self,
        messages: AgentRunInputs | None = None,
        *,
        stream: Literal[True],
        session: AgentSession | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse[Any]]: ...

    def run(
        self,
        messages: AgentRunInputs | None = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> Awaitable[AgentResponse[Any]] | ResponseStream[AgentResponseUpdate, AgentResponse[Any]]:
        if stream:
            raise NotImplementedError("the scenarios run workflows without streaming")
        return self._respond(_as_messages(messages))

    async def _respond(self, conversation: list[Message]) -> AgentResponse[Any]:
        text = self._reply(conversation)
        return AgentResponse(messages=[Message("assistant", [text], author_name=self.name)])


def _as_messages(messages: AgentRunInputs | None) -> list[Message]:
    if messages is None:
        return []
    items = [messages] if isinstance(messages, (str, Content, Message)) else list(messages)
    return [item if isinstance(item, Message) else Message("user", [item]) for item in items]


def _texts(conversation: Sequence[Message]) -> list[str]:
    return [message.text for message in conversation]


# -- Scenario 1: Magentic with human plan review ---------------------------------------

MAGENTIC_WORKFLOW = "magentic-plan-review"
RESEARCHER = "researcher"
MAGENTIC_TASK = "Summarise how a paused workflow is resumed."
PLAN_FEEDBACK = "Mention that resuming needs no running process."


def researcher_reply(conversation: Sequence[Message]) -> str:
    """Facts that show whether the reviewer's feedback reached the researcher."""
    heard_feedback = any(PLAN_FEEDBACK in text for text in _texts(conversation))
    facts = "Resume loads the pause checkpoint and delivers the response"
    return f"{facts}; no process has to stay running." if heard_feedback else f"{facts}."


class ScriptedMagenticManager(MagenticManagerBase):
    """A Magentic manager with scripted plan and progress-ledger answers (no language model).

    One round: the researcher is asked once, and as soon as a researcher message is in the
    conversation the request counts as satisfied and the final answer quotes it.
    """

    def __init__(self) -> None:
        super().__init__(max_stall_count=1, max_round_count=4)

    async def plan(self, magentic_context: MagenticContext) -> Message:
        return Message(
            "assistant",
            [f"Plan for '{magentic_context.task}': ask the {RESEARCHER}, then answer."],
            author_name=MAGENTIC_MANAGER_NAME,
        )

    async def replan(self, magentic_context: MagenticContext) -> Message:
        feedback = [text for text in _texts(magentic_context.chat_history) if text == PLAN_FEEDBACK]
        return Message(
            "assistant",
            [f"Revised plan: ask the {RESEARCHER}, then answer ({len(feedback)} review note(s) applied)."],
            author_name=MAGENTIC_MANAGER_NAME,
        )

    async def create_progress_ledger(self, magentic_context: MagenticContext) -> MagenticProgressLedger:
        done = bool(_researcher_messages(magentic_context))
        # The reviewer's note reaches the researcher only through the restored chat history:
        # it was given in the run before the second pause, and this runs after resuming it.
        question = "How is a paused workflow resumed?"
        if PLAN_FEEDBACK in _texts(magentic_context.chat_history):
            question = f"{question} {PLAN_FEEDBACK}"
        return MagenticProgressLedger(
            is_request_satisfied=MagenticProgressLedgerItem("the researcher has reported", done),
            is_in_loop=MagenticProgressLedgerItem("first pass", False),
            is_progress_being_made=MagenticProgressLedgerItem("following the plan", True),
            next_speaker=MagenticProgressLedgerItem("the only participant", RESEARCHER),
            instruction_or_question=MagenticProgressLedgerItem("the plan's single step", question),
        )

    async def prepare_final_answer(self, magentic_context: MagenticContext) -> Message:
        findings = _researcher_messages(magentic_context)
        answer = findings[-1].text if findings else "no findings"
        plans = [m.text for m in magentic_context.chat_history if m.author_name == MAGENTIC_MANAGER_NAME]
        plan = plans[0] if plans else "no plan"
        return Message("assistant", [f"Final answer: {answer} [{plan}]"], author_name=MAGENTIC_MANAGER_NAME)


def _researcher_messages(magentic_context: MagenticContext) -> list[Message]:
    return [message for message in magentic_context.chat_history if message.author_name == RESEARCHER]


def build_magentic(storage: CheckpointStorage) -> Workflow:
    """A new Magentic workflow instance: new manager, new participant, plan review on."""
    researcher = ScriptedAgent(RESEARCHER, "Looks facts up.", researcher_reply)
    return MagenticBuilder(
        participants=[researcher],
        manager=ScriptedMagenticManager(),
        name=MAGENTIC_WORKFLOW,
        enable_plan_review=True,
        checkpoint_storage=storage,
    ).build()


def answer_plan_review(request: object, pause_index: int) -> MagenticPlanReviewResponse:
    """First review asks for a revision, the second approves the revised plan."""
    if not isinstance(request, MagenticPlanReviewRequest):
        raise TypeError(f"expected a MagenticPlanReviewRequest, got {type(request).__qualname__}")
    return request.revise(PLAN_FEEDBACK) if pause_index == 0 else request.approve()


# -- Scenario 2: group chat with request info after the writer --------------------------

GROUP_CHAT_WORKFLOW = "group-chat-review"
WRITER = "writer"
CRITIC = "critic"
GROUP_CHAT_TASK = "Draft a one-line release note for checkpoint resume."
WRITER_FEEDBACK = "Say that it works across processes."


def writer_reply(conversation: Sequence[Message]) -> str:
    """A draft, revised once the human's feedback is in the conversation."""
    if any(WRITER_FEEDBACK in text for text in _texts(conversation)):
        return "Draft 2: paused workflows resume from MongoDB, across processes."
    return "Draft 1: paused workflows resume from MongoDB."


def critic_reply(conversation: Sequence[Message]) -> str:
    """Quotes the latest draft it was shown, so the output proves which draft won."""
    drafts = [text for text in _texts(conversation) if text.startswith("Draft ")]
    return f"Critic approves: {drafts[-1] if drafts else 'nothing to review'}"


def round_robin(state: GroupChatState) -> str:
    """Writer first, then the critic: a pure function of the round index."""
    names = list(state.participants)
    return names[state.current_round % len(names)]


def build_group_chat(storage: CheckpointStorage) -> Workflow:
    """A new group chat instance whose writer pauses for a human after each draft."""
    writer = ScriptedAgent(WRITER, "Writes drafts.", writer_reply)
    critic = ScriptedAgent(CRITIC, "Reviews drafts.", critic_reply)
    return (
        GroupChatBuilder(
            participants=[writer, critic],
            selection_func=round_robin,
            max_rounds=2,
            # The critic's reply is an output too, so the outputs show which draft it saw.
            output_from=[CRITIC],
            name=GROUP_CHAT_WORKFLOW,
            checkpoint_storage=storage,
        )
        .with_request_info(agents=[WRITER])
        .build()
    )


def answer_writer_review(request: object, pause_index: int) -> AgentRequestInfoResponse:
    """First review sends feedback to the writer, the second approves the revised draft."""
    del request  # the AgentExecutorResponse under review; the answer depends on the round only
    if pause_index == 0:
        return AgentRequestInfoResponse.from_strings([WRITER_FEEDBACK])
    return AgentRequestInfoResponse.approve()


# -- Running a scenario on one storage --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One orchestration, its task, and how the scripted human answers its pauses."""

    workflow_name: str
    task: str
    build: Callable[[CheckpointStorage], Workflow]
    answer: Callable[[object, int], object]
    max_pauses: int


SCENARIOS: Mapping[str, Scenario] = {
    "magentic": Scenario(MAGENTIC_WORKFLOW, MAGENTIC_TASK, build_magentic, answer_plan_review, max_pauses=2),
    "group_chat": Scenario(
        GROUP_CHAT_WORKFLOW, GROUP_CHAT_TASK, build_group_chat, answer_writer_review, max_pauses=2
    ),
}


class StorageFactory:
    """Hands out the storage each step of a run uses.

    In memory the storage *is* the data, so every step gets the same object. For MongoDB
    each step gets a new storage object bound to the same run; only the client (the
    database) is shared, as between two processes. No ``allowed_checkpoint_types``: the
    orchestration's own types are registered by the orchestrations package, and the storage
    must honour that registration although it happened before the storage was imported.
    """

    def __init__(self, kind: Literal["memory", "mongodb"], workflow_name: str) -> None:
        self._kind = kind
        self._memory = InMemoryCheckpointStorage()
        self._client = InMemoryMongoClient()
        self._options = MongoDBCheckpointStorageOptions(
            tenant_id="tenant-e2e", workflow_name=workflow_name, session_id="orchestration-run-1"
        )

    async def new_storage(self) -> CheckpointStorage:
        if self._kind == "memory":
            return self._memory
        storage = MongoDBCheckpointStorage(
            mongo_client=self._client, options=self._options, database_name="orchestrations"
        )
        await storage.ensure_indexes()
        return storage

    async def close(self) -> None:
        await self._client.close()


async def run_scenario(scenario: Scenario, kind: Literal["memory", "mongodb"]) -> dict[str, JSONValue]:
    """Pause, then resume each pause in a new workflow instance, and summarise what happened.

    An exception ends the run but not the summary: what happened before it is still reported,
    with the error, so a failing test shows how far the run got.
    """
    summary: dict[str, JSONValue] = {
        "error": None,
        "pauses": [],
        "runs": [],
        "outputs": [],
        "final_checkpoint_count": None,
        "final_pending_request_count": None,
    }
    factory = StorageFactory(kind, scenario.workflow_name)
    try:
        await drive(scenario, factory, summary)
        storage = await factory.new_storage()
        stored = await storage.list_checkpoint_ids(workflow_name=scenario.workflow_name)
        summary["final_checkpoint_count"] = len(stored)
        latest = await storage.get_latest(workflow_name=scenario.workflow_name)
        if latest is not None:
            summary["final_pending_request_count"] = len(latest.pending_request_info_events)
    except Exception as error:
        summary["error"] = f"{type(error).__qualname__}: {error}"
    finally:
        await factory.close()
    return summary


async def drive(scenario: Scenario, factory: StorageFactory, summary: dict[str, JSONValue]) -> None:
    """Run the task, then answer each pause from a new workflow instance, recording each step."""
    pauses, runs, outputs = (cast("list[JSONValue]", summary[key]) for key in ("pauses", "runs", "outputs"))
    result = await scenario.build(await factory.new_storage()).run(scenario.task)
    runs.append(render_events(result))
    outputs.extend(render_output(output) for output in result.get_outputs())
    while requests := result.get_request_info_events():
        if len(pauses) == scenario.max_pauses:
            summary["error"] = f"the workflow paused more than {scenario.max_pauses} times"
            return
        storage = await factory.new_storage()
        pause, checkpoint = await describe_pause(storage, scenario.workflow_name, requests)
        pauses.append(pause)
        if checkpoint is None:
            return  # nothing stored to resume from: the pause summary says so
        responses = {event.request_id: scenario.answer(event.data, len(pauses) - 1) for event in requests}
        resumed = scenario.build(await factory.new_storage())
        result = await resumed.run(checkpoint_id=checkpoint.checkpoint_id, responses=responses)
        runs.append(render_events(result))
        outputs.extend(render_output(output) for output in result.get_outputs())


async def describe_pause(
    storage: CheckpointStorage, workflow_name: str, requests: list[WorkflowEvent[Any]]
) -> tuple[dict[str, JSONValue], WorkflowCheckpoint | None]:
    """What the storage holds while the workflow waits, and the checkpoint to resume from."""
    request_ids = {event.request_id for event in requests}
    stored = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    latest = await storage.get_latest(workflow_name=workflow_name)
    # The pause checkpoint is the latest one, and it must carry every request just raised.
    paused = latest if latest is not None and request_ids <= set(latest.pending_request_info_events) else None
    summary: dict[str, JSONValue] = {
        "request_types": [type(event.data).__name__ for event in requests],
        "checkpoint_count": len(stored),
        "pause_checkpoint_stored": paused is not None,
        "pending_request_types": None,
        "pending_request_details": None,
        "pending_response_types": None,
        "state_types": None,
    }
    if paused is not None:
        pending = [paused.pending_request_info_events[request_id] for request_id in sorted(request_ids)]
        summary["pending_request_types"] = [type(event.data).__name__ for event in pending]
        summary["pending_request_details"] = [describe_payload(event.data) for event in pending]
        summary["pending_response_types"] = [
            getattr(event.response_type, "__name__", repr(event.response_type)) for event in pending
        ]
        summary["state_types"] = [*sorted(non_builtin_types(paused))]
    return summary, paused


# -- Rendering results as JSON ----------------------------------------------------------


def render_events(events: Sequence[WorkflowEvent[Any]]) -> list[JSONValue]:
    """The run's event sequence: kind, executor and payload type (ids and times differ per run)."""
    rendered: list[JSONValue] = []
    for event in events:
        data = event.data
        payload = None if data is None else type(data).__name__
        rendered.append([str(event.type), event.executor_id, payload, describe_payload(data)])
    return rendered


def describe_payload(data: object) -> str | None:
    """The part of an event's payload that shows what the orchestration decided."""
    if isinstance(data, MagenticOrchestratorEvent):
        content = data.content
        text = content.text if isinstance(content, Message) else content.next_speaker.answer
        return f"{data.event_type.value}: {text}"
    if isinstance(data, MagenticPlanReviewRequest):
        return data.plan.text
    if isinstance(data, AgentExecutorResponse):
        return data.agent_response.text
    if isinstance(data, (GroupChatRequestSentEvent, GroupChatResponseReceivedEvent)):
        return f"round {data.round_index}: {data.participant_name}"
    return None


def render_output(output: object) -> JSONValue:
    """An output as its type and messages (role, author, text), which is what a caller reads."""
    if isinstance(output, AgentResponse):
        return {"type": "AgentResponse", "messages": [render_message(m) for m in output.messages]}
    if isinstance(output, list) and all(isinstance(item, Message) for item in output):
        return {"type": "list[Message]", "messages": [render_message(m) for m in output]}
    return {"type": type(output).__name__, "repr": repr(output)}


def render_message(message: Message) -> JSONValue:
    return {"role": str(message.role), "author_name": message.author_name, "text": message.text}


def _type_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def attributes_of(value: object) -> list[object]:
    """The values an object holds: pydantic or dataclass fields, else its attributes.

    Enum members are leaves: their attributes belong to the class, not the checkpoint.
    """
    if isinstance(value, enum.Enum):
        return []
    if isinstance(value, BaseModel):
        return [getattr(value, name) for name in type(value).model_fields]
    if dataclasses.is_dataclass(value):
        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    attributes: list[object] = list(getattr(value, "__dict__", {}).values())
    attributes.extend(getattr(value, name, None) for name in getattr(type(value), "__slots__", ()))
    return attributes


def non_builtin_types(checkpoint: WorkflowCheckpoint) -> set[str]:
    """Every class other than the built-in containers and scalars reachable from the checkpoint.

    Walks the messages, state and pending request-info events through containers, dataclass
    fields, pydantic fields and instance attributes, so the summary shows which classes a
    storage has to round-trip for this orchestration.
    """
    found: set[str] = set()
    seen: set[int] = set()

    def walk(value: object) -> None:
        if isinstance(value, (str, bytes, int, float, bool, type(None))) or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, type):
            # A class object (a request's response type, say) is stored by name.
            found.add(f"class {_type_key(value)}")
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item)
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)
            return
        found.add(_type_key(type(value)))
        for attribute in attributes_of(value):
            walk(attribute)

    walk(checkpoint.messages)
    walk(checkpoint.state)
    walk(checkpoint.pending_request_info_events)
    return found


# -- Entry point ------------------------------------------------------------------------


class _WarningCollector(logging.Handler):
    """Keeps Agent Framework's warnings: a save it could not make is logged, not raised."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


async def summarise(name: str) -> dict[str, JSONValue]:
    scenario = SCENARIOS[name]
    collector = _WarningCollector()
    logging.getLogger().addHandler(collector)
    summary: dict[str, JSONValue] = {
        "scenario": name,
        "import_order": list(import_order()),
        "versions": {
            "agent_framework": str(getattr(sys.modules["agent_framework"], "__version__", "unknown")),
            "agent_framework_orchestrations": agent_framework_orchestrations.__version__,
        },
    }
    for kind in ("memory", "mongodb"):
        collector.messages = []
        result = await run_scenario(scenario, kind)
        result["warnings"] = list(collector.messages)
        summary[kind] = result
    return summary


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in SCENARIOS:
        print(f"usage: orchestration_scenarios.py {{{'|'.join(SCENARIOS)}}}", file=sys.stderr)
        return 2
    print(json.dumps(asyncio.run(summarise(argv[0])), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
