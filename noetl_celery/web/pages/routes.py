"""The pages on the FastAPI app (`noetl-celery serve`): thin adapters around `Site`
(web.pages.site), behind the app's auth gate like every route. Handlers are plain
functions: FastAPI runs them on its thread pool, so the engine's blocking reads never
hold the event loop."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from noetl_celery.errors import NoetlError
from noetl_celery.web.deps import EngineDep
from noetl_celery.web.inputs import CheckedRoute, Handler
from noetl_celery.web.pages import render
from noetl_celery.web.pages.actions import Form, same_origin
from noetl_celery.web.pages.site import Answer, Site, error_answer


class PageRoute(CheckedRoute):
    """A page: its request values checked as the API's are (web.inputs), and an engine
    error (a refused value, the engine database away) answered as an error page."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except NoetlError as exc:
                return _answer(error_answer(exc))

        return page


# HTML by default (a page, or its error page); the redirect and the static files say what
# they answer instead. Outside the OpenAPI document: the document is the JSON API's.
router = APIRouter(
    tags=["pages"],
    include_in_schema=False,
    route_class=PageRoute,
    default_response_class=HTMLResponse,
)
# a form post is a few short fields: anything larger is not one of ours
MAX_FORM_BYTES = 16 * 1024


def _answer(answer: Answer) -> Response:
    if answer.location is not None:
        return RedirectResponse(answer.location, status_code=303)
    html = (
        answer.body
        if answer.fragment
        else render.layout(answer.title, answer.body, base="", active=answer.active)
    )
    return HTMLResponse(html, status_code=answer.status, headers={"Cache-Control": "no-store"})


def _params(request: Request) -> dict[str, str]:
    return dict(request.query_params)


async def _form(request: Request, engine: EngineDep) -> Form | Response:
    """The url-encoded form of a POST (every value of a repeated field kept: the
    redrive's checked boxes), or the page that refuses it: 403 when it did not come
    from our own pages, 413 when it is larger than any of our forms makes it."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not same_origin(headers, headers.get("host", "")):
        return _answer(Site(engine).forbidden())
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return _answer(
            Site(engine).refused(
                413,
                f"refused: the form is {len(body):,} bytes, more than {MAX_FORM_BYTES:,}; "
                "check fewer items at once",
            )
        )
    return Form(parse_qsl(body.decode("utf-8", "replace")))


@router.get("/", response_class=RedirectResponse)
def home() -> Response:
    return RedirectResponse("/executions", status_code=307)


@router.get("/executions")
def executions(request: Request, engine: EngineDep) -> Response:
    return _answer(Site(engine).executions(_params(request)))


@router.get("/executions/{execution_id}")
def execution(execution_id: str, request: Request, engine: EngineDep) -> Response:
    return _answer(Site(engine).execution(execution_id, _params(request)))


@router.get("/executions/{execution_id}/events")
def events(execution_id: str, request: Request, engine: EngineDep) -> Response:
    return _answer(Site(engine).events(execution_id, _params(request)))


@router.get("/schedules")
def schedules(request: Request, engine: EngineDep) -> Response:
    return _answer(Site(engine).schedules(_params(request)))


@router.get("/rate-limits")
def rate_limits(request: Request, engine: EngineDep) -> Response:
    return _answer(Site(engine).rate_limits(_params(request)))


@router.post("/executions/{execution_id}/cancel")
async def cancel(execution_id: str, request: Request, engine: EngineDep) -> Response:
    form = await _form(request, engine)
    if isinstance(form, Response):
        return form
    return _answer(await run_in_threadpool(Site(engine).cancel, execution_id))


@router.post("/executions/{execution_id}/rerun")
async def rerun(execution_id: str, request: Request, engine: EngineDep) -> Response:
    form = await _form(request, engine)
    if isinstance(form, Response):
        return form
    return _answer(await run_in_threadpool(Site(engine).rerun, execution_id, form))


@router.post("/executions/{execution_id}/redrive")
async def redrive(execution_id: str, request: Request, engine: EngineDep) -> Response:
    form = await _form(request, engine)
    if isinstance(form, Response):
        return form
    return _answer(await run_in_threadpool(Site(engine).redrive, execution_id, form))


@router.post("/schedules/{schedule_id}/{action}")
async def schedule(schedule_id: str, action: str, request: Request, engine: EngineDep) -> Response:
    form = await _form(request, engine)
    if isinstance(form, Response):
        return form
    return _answer(await run_in_threadpool(Site(engine).schedule, schedule_id, action))


@router.get("/pages-static/{name}", response_class=Response)
def static(name: str) -> Response:
    found = render.static_file(name)
    if found is None:
        return Response("not found", status_code=404, media_type="text/plain")
    content, media = found
    return Response(content, media_type=media, headers={"Cache-Control": "max-age=300"})
