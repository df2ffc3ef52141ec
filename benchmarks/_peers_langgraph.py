"""LangGraph's side of peers.py, with Temporal's plugin (`temporalio-langgraph`, `temporalio.langgraph`), set up
as its guide shows for the Graph API: a `StateGraph` whose nodes each carry `execute_in` in their metadata (here
both run as activities, with a start-to-close timeout), registered by name in a `LangGraphPlugin` on the client
(a client plugin reaches its worker too); a workflow fetches it with `graph(name).compile()` and calls `ainvoke`.

The graph is the ReAct loop of LangGraph's own agent tutorial: a `model` node (a LangChain chat model with the
tool bound) and a `tools` node, joined by a conditional edge that goes to `tools` while the model asks for a tool
call and ends the run otherwise. The edge runs in the workflow; each node is an activity, so a step is a model
activity and a tool activity, as for the other peers.

Set up beyond the guide, each from LangChain's or LangGraph's own docs:
- the model is `langchain_openai.ChatOpenAI` (chat completions, which the fake server speaks) with
  `max_retries=0`, so Temporal owns the retries (the other peers do the same); base URL and key come from
  OPENAI_BASE_URL / OPENAI_API_KEY, as LangChain reads them;
- the tools node runs the one tool itself and answers with `ToolMessage`s (what the prebuilt `ToolNode` does),
  because the plugin wraps plain node functions as activities and the prebuilt node is not one;
- `recursion_limit` is raised: its default of 25 super-steps stops a run after 12 tool steps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, TypedDict

from _peers_common import INSTRUCTIONS, MODEL_NAME, TOOL_DOC, TOOL_NAME, async_effect_then_hold, tick_output
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import AIMessage, ToolMessage, convert_to_messages
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from temporalio.langgraph import LangGraphPlugin, graph

NAME = "langgraph"
TASK_QUEUE = "peers-langgraph"
GRAPH = "peers_langgraph"
RUN_TIMEOUT = timedelta(minutes=30)

TICK_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": TOOL_DOC,
        "parameters": {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "of": {"type": "integer"},
                "pad": {"type": "integer"},
                "hold": {"type": "number"},
                "tag": {"type": "string"},
            },
            "required": ["n", "of", "pad", "hold", "tag"],
        },
    },
}


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


_model: Any = None


def chat_model() -> Any:
    """The model with the tool bound, built once per worker process (as a module-level model would be)."""
    global _model
    if _model is None:
        _model = ChatOpenAI(model=MODEL_NAME, max_retries=0).bind_tools([TICK_SCHEMA])
    return _model


async def call_model(state: State) -> dict[str, Any]:
    # Across the activity boundary the messages are plain dicts: LangChain turns them back into messages.
    messages = [("system", INSTRUCTIONS), *convert_to_messages(state["messages"])]
    return {"messages": [await chat_model().ainvoke(messages)]}


async def tick(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    """Advance the count by one and return the tick."""
    await async_effect_then_hold(n, hold, tag)
    return tick_output(n, of, pad, hold, tag)


async def run_tools(state: State) -> dict[str, Any]:
    last = convert_to_messages(state["messages"][-1:])[0]
    assert isinstance(last, AIMessage)
    return {
        "messages": [
            ToolMessage(content=await tick(**call["args"]), tool_call_id=call["id"], name=call["name"])
            for call in last.tool_calls
        ]
    }


async def route(state: State) -> str:
    # Async: in a workflow LangGraph may not hand a sync function to a thread pool.
    last = convert_to_messages(state["messages"][-1:])[0]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def build_graph() -> StateGraph:
    builder = StateGraph(State)
    activity = {"execute_in": "activity", "start_to_close_timeout": timedelta(seconds=30)}
    builder.add_node("model", call_model, metadata=activity)
    builder.add_node("tools", run_tools, metadata={**activity, "start_to_close_timeout": timedelta(seconds=10)})
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder


@workflow.defn
class LangGraphPeerWorkflow:
    @workflow.run
    async def run(self, task: str, max_steps: int) -> str:
        app = graph(GRAPH).compile()
        # Each step is two super-steps (model, tools), and the answer one more.
        result = await app.ainvoke({"messages": [("user", task)]}, {"recursion_limit": 2 * max_steps + 5})
        return str(convert_to_messages(result["messages"][-1:])[0].content)


_plugin: LangGraphPlugin | None = None


def plugin() -> LangGraphPlugin:
    """One plugin per process: it wraps the graph's nodes as activities when it is built."""
    global _plugin
    if _plugin is None:
        _plugin = LangGraphPlugin(graphs={GRAPH: build_graph()})
    return _plugin


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[plugin()])


def build_worker(client: Client, task_queue: str = TASK_QUEUE) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[LangGraphPeerWorkflow])


async def start(client: Client, run_id: str, task: str, steps: int, task_queue: str = TASK_QUEUE) -> object:
    """Start a run of `steps` model requests at most; returns the workflow handle."""
    return await client.start_workflow(
        LangGraphPeerWorkflow.run,
        args=[task, steps + 5],
        id=run_id,
        task_queue=task_queue,
        execution_timeout=RUN_TIMEOUT,
    )
