"""The console's actions: each is one API call as the signed-in user (its role, its projects, the request's
validation; the service records the event), then back to the page it came from."""

from __future__ import annotations

from starlette.responses import RedirectResponse, Response

from controlplane.web.visit import Handler, Visit
from drover import changefile
from drover.errors import InvalidArgument
from drover.recovery import amendment_request
from drover.v1 import change_pb2, operations_pb2


def _back(to: str) -> Response:
    return RedirectResponse(to, status_code=303)


async def cancel_change(v: Visit) -> Response:
    change_id = v.request.path_params["change_id"]
    await v.call("ChangeService/CancelChange", change_pb2.CancelChangeRequest(change_id=change_id))
    return _back(f"/changes/{change_id}")


async def raise_budget(v: Visit) -> Response:
    change_id = v.request.path_params["change_id"]
    try:
        budget = float(v.form.get("budget_usd", ""))
    except ValueError:
        raise InvalidArgument("must be a number of dollars", field="budget_usd") from None
    await v.call("ChangeService/RaiseBudget", change_pb2.RaiseBudgetRequest(change_id=change_id, budget_usd=budget))
    return _back(f"/changes/{change_id}")


async def retry_task(v: Visit) -> Response:
    request = change_pb2.RetryTaskRequest(task_id=v.request.path_params["task_id"], tier=v.form.get("tier", ""))
    change = await v.call("ChangeService/RetryTask", request)
    return _back(f"/changes/{change.id}")


async def amend_change(v: Visit) -> Response:
    """The Amend form: a textarea with what `drover amend` reads from its file (tasks:, edges:)."""
    change_id = v.request.path_params["change_id"]
    data = changefile.parse(v.form.get("amendment", ""), "amendment", amendment=True)
    await v.call(
        "ChangeService/AmendChange", amendment_request(change_id, data.get("tasks") or [], data.get("edges") or [])
    )
    return _back(f"/changes/{change_id}")


async def raise_meter(v: Visit) -> Response:
    try:
        limit = float(v.form.get("limit", ""))
    except ValueError:
        raise InvalidArgument("must be a number (USD, or calls for a calls meter)", field="limit") from None
    request = operations_pb2.RaiseMeterRequest(meter=v.form.get("meter", ""), name=v.form.get("name", ""), limit=limit)
    await v.call("OperationsService/RaiseMeter", request)
    return _back("/spend")


async def cancel_run(v: Visit) -> Response:
    run_id = v.request.path_params["run_id"]
    reason = v.form.get("reason", "") or f"cancelled in the console by {v.who.name}"
    await v.call("OperationsService/CancelRun", operations_pb2.CancelRunRequest(run_id=run_id, reason=reason))
    return _back(f"/runs/{run_id}")


async def send_input(v: Visit) -> Response:
    run_id = v.request.path_params["run_id"]
    request = operations_pb2.SendInputRequest(run_id=run_id, kind=v.form.get("kind", ""), text=v.form.get("text", ""))
    await v.call("OperationsService/SendInput", request)
    return _back(f"/runs/{run_id}")


async def answer_question(v: Visit) -> Response:
    question_id = v.request.path_params["question_id"]
    request = operations_pb2.AnswerQuestionRequest(question_id=question_id, text=v.form.get("text", ""))
    await v.call("OperationsService/AnswerQuestion", request)
    back = v.form.get("back", "")
    return _back(back if back.startswith("/runs/") else "/fleet")


async def drain(v: Visit) -> Response:
    await v.call("OperationsService/DrainAgent", operations_pb2.DrainAgentRequest(name=v.request.path_params["name"]))
    return _back("/fleet")


async def undrain(v: Visit) -> Response:
    name = v.request.path_params["name"]
    await v.call("OperationsService/UndrainAgent", operations_pb2.UndrainAgentRequest(name=name))
    return _back("/fleet")


ACTIONS: dict[str, Handler] = {
    "/changes/{change_id}/cancel": cancel_change,
    "/changes/{change_id}/budget": raise_budget,
    "/tasks/{task_id}/retry": retry_task,
    "/changes/{change_id}/amend": amend_change,
    "/meters/raise": raise_meter,
    "/runs/{run_id}/cancel": cancel_run,
    "/runs/{run_id}/input": send_input,
    "/questions/{question_id}/answer": answer_question,
    "/agents/{name}/drain": drain,
    "/agents/{name}/undrain": undrain,
}
