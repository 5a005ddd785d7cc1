"""HTTP: the REST API, NoETL's routes, `/metrics` and the operator pages.

    app.py          create_app(engine, settings): one FastAPI app, everything mounted
    auth.py         bearer token / basic auth from the settings (pure check + ASGI gate)
    problems.py     engine errors -> HTTP status and `{"detail": ...}` bodies
    api_native.py   /api/v1/executions...: list, detail, graph, failed items, events, logs,
                    start, cancel, rerun
    api_manage.py   /api/v1/catalog, /api/v1/schedules (included by api_native)
    api_noetl.py    /api/...: the routes NoETL's own CLI (5.3.x) and GUI call
    metrics.py      /metrics: Prometheus, read from the engine database per scrape
    pages/          server-rendered pages (Jinja2), shared with Flower (tasks/flower_pages)

Handlers are thin: they parse, call the `Engine` facade (engine.service), and shape
JSON; decisions and queries live below them.
"""
